"""GPU quotas from scheduler objects or a TOML table (pure parse; `read_quotas` reads files).

- Kueue ``ClusterQueue``: the ``nominalQuota`` of GPU resources summed over flavors,
  ``borrowingLimit`` (limit = nominal + borrowing limit; none: unlimited within the cohort),
  ``cohortName`` (v1beta2 ``cohort``), the preemption policy. ``LocalQueue``: an alias
  (``namespace/name``, ``name`` and the namespace) for its ClusterQueue. ``Cohort``: its parent.
- Volcano ``Queue``: GPUs from ``guarantee.resource`` else ``deserved`` (the promise) and
  ``capability`` (the limit); ``weight``; ``reclaimable``; the ``volcano.sh/hierarchy``
  annotation's parent path.
- KAI-Scheduler ``Queue`` (scheduling.run.ai): ``resources.gpu.quota``, ``limit`` (-1: none),
  ``overQuotaWeight``, ``parentQueue``.
- TOML: ``[quotas.NAME]`` tables with ``gpus`` and optional ``limit``, ``weight``, ``parent``,
  ``preemption``.

A GPU resource is ``nvidia.com/gpu``, ``amd.com/gpu``, ``gpu`` or a name ending in ``/gpu``.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.quota_model import QueueQuota, Quotas

FIX = (
    "Pass Kueue ClusterQueue/LocalQueue/Cohort, Volcano Queue or KAI Queue YAML/JSON "
    "(kubectl get clusterqueues -o yaml), or a TOML file with [quotas.NAME] gpus = N"
)
_SUFFIX = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2.0**10, "Mi": 2.0**20,
           "Gi": 2.0**30, "Ti": 2.0**40}  # fmt: skip


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``16``, ``"16"``, ``"500m"``, ``"1Gi"``) as a number."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _SUFFIX[suffix]
    return float(text)


def is_gpu(resource: str) -> bool:
    return resource == "gpu" or resource.endswith("/gpu")


def _gpus_in(resources: Any) -> float | None:
    """Σ GPU quantities of a resource list (``{name: qty}``), None when it names no GPU."""
    if not isinstance(resources, Mapping):
        return None
    found = [quantity(v) for k, v in resources.items() if is_gpu(str(k))]
    return sum(found) if found else None


def _kueue_queue(obj: Mapping[str, Any], source: str) -> QueueQuota | None:
    spec = obj.get("spec") or {}
    nominal = borrow = 0.0
    unlimited, seen = False, False
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if not is_gpu(str(res.get("name", ""))):
                    continue
                seen = True
                nominal += quantity(res.get("nominalQuota", 0))
                if "borrowingLimit" in res:
                    borrow += quantity(res["borrowingLimit"])
                else:
                    unlimited = True
    if not seen:
        return None
    cohort = str(spec.get("cohortName") or spec.get("cohort") or "")
    preemption = spec.get("preemption") or {}
    policy = ", ".join(
        f"{k}={v.get('policy') if isinstance(v, Mapping) else v}" for k, v in preemption.items()
    )
    return QueueQuota(
        name=str(obj["metadata"]["name"]),
        gpus=nominal,
        limit=math.nan if (unlimited and cohort) else nominal + borrow,
        parent=cohort,
        preemption=policy,
        source=f"{source} (Kueue ClusterQueue)",
    )


def _volcano_queue(obj: Mapping[str, Any], source: str) -> QueueQuota | None:
    spec = obj.get("spec") or {}
    promised = _gpus_in((spec.get("guarantee") or {}).get("resource"))
    if promised is None:
        promised = _gpus_in(spec.get("deserved"))
    cap = _gpus_in(spec.get("capability"))
    if promised is None and cap is None:
        return None
    meta = obj.get("metadata") or {}
    path = str((meta.get("annotations") or {}).get("volcano.sh/hierarchy", ""))
    return QueueQuota(
        name=str(meta["name"]),
        gpus=promised if promised is not None else 0.0,
        limit=cap if cap is not None else math.nan,
        weight=float(spec.get("weight", math.nan)),
        parent="/".join(path.split("/")[:-1]),
        preemption=f"reclaimable={spec.get('reclaimable', True)}",
        source=f"{source} (Volcano Queue)",
    )


def _kai_queue(obj: Mapping[str, Any], source: str) -> QueueQuota | None:
    spec = obj.get("spec") or {}
    gpu = (spec.get("resources") or {}).get("gpu")
    if not isinstance(gpu, Mapping):
        return None
    limit = float(gpu.get("limit", -1))
    return QueueQuota(
        name=str(obj["metadata"]["name"]),
        gpus=max(float(gpu.get("quota", 0)), 0.0),
        limit=math.nan if limit < 0 else limit,
        weight=float(gpu.get("overQuotaWeight", math.nan)),
        parent=str(spec.get("parentQueue") or ""),
        source=f"{source} (KAI Queue)",
    )


def _objects(doc: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(doc, Mapping):
        if isinstance(doc.get("items"), list):
            for item in doc["items"]:
                yield from _objects(item)
        elif "kind" in doc:
            yield doc


def parse_quota_objects(docs: Iterable[Any], source: str, into: Quotas | None = None) -> Quotas:
    """Quotas from Kubernetes objects (other kinds are skipped)."""
    out = into or Quotas()
    for obj in (o for d in docs for o in _objects(d)):
        kind, api = str(obj.get("kind")), str(obj.get("apiVersion", ""))
        meta = obj.get("metadata") or {}
        try:
            quota = None
            if kind == "ClusterQueue" and api.startswith("kueue."):
                quota = _kueue_queue(obj, source)
            elif kind == "Queue" and api.startswith("scheduling.volcano.sh"):
                quota = _volcano_queue(obj, source)
            elif kind == "Queue" and api.startswith("scheduling.run.ai"):
                quota = _kai_queue(obj, source)
            elif kind == "LocalQueue":
                target = str((obj.get("spec") or {}).get("clusterQueue", ""))
                name, ns = str(meta.get("name", "")), str(meta.get("namespace", ""))
                for alias in (name, f"{ns}/{name}" if ns else "", ns):
                    if alias and target:
                        out.aliases.setdefault(alias, target)
            elif kind == "Cohort" and api.startswith("kueue."):
                out.cohorts[str(meta.get("name"))] = str(
                    (obj.get("spec") or {}).get("parentName") or ""
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchedulerInputError(
                source, f"{kind} {meta.get('name', '?')!r}: {type(exc).__name__}: {exc}", FIX
            ) from None
        if quota is not None:
            out.queues[quota.name] = quota
    return out


def parse_quota_toml(data: Mapping[str, Any], source: str, into: Quotas | None = None) -> Quotas:
    """Quotas from ``[quotas.NAME]`` tables."""
    out = into or Quotas()
    table = data.get("quotas")
    if not isinstance(table, Mapping) or not table:
        raise SchedulerInputError(source, "no [quotas.NAME] table", FIX)
    for name, row in table.items():
        if not isinstance(row, Mapping) or not isinstance(row.get("gpus"), int | float):
            raise SchedulerInputError(
                source, f"[quotas.{name}] needs gpus = N (a number), got {row!r}", FIX
            )
        out.queues[str(name)] = QueueQuota(
            name=str(name),
            gpus=float(row["gpus"]),
            limit=float(row.get("limit", math.nan)),
            weight=float(row.get("weight", math.nan)),
            parent=str(row.get("parent", "")),
            preemption=str(row.get("preemption", "")),
            source=f"{source} (TOML)",
        )
    return out


def _load(path: Path) -> tuple[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SchedulerInputError(str(path), exc.strerror or type(exc).__name__, FIX) from None
    if path.suffix == ".toml":
        try:
            return "toml", tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SchedulerInputError(str(path), f"not TOML ({exc})", FIX) from None
    try:
        return "docs", [json.loads(data)]
    except ValueError:
        pass
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise SchedulerInputError(
            str(path), "it is not JSON, and reading YAML needs PyYAML (pip install pyyaml)", FIX
        ) from None
    try:
        return "docs", [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as exc:
        raise SchedulerInputError(str(path), f"not JSON, YAML or TOML ({exc})", FIX) from None


def read_quotas(paths: Sequence[Path]) -> Quotas:
    """The quotas of every file (YAML, JSON or ``.toml``), merged; a later file wins."""
    out = Quotas()
    for path in paths:
        kind, data = _load(path)
        if kind == "toml":
            parse_quota_toml(data, str(path), out)
        else:
            parse_quota_objects(data, str(path), out)
    if not out.queues:
        raise SchedulerInputError(
            ", ".join(str(p) for p in paths), "no queue in these files has a GPU quota", FIX
        )
    return out
