"""The pod labels file: Kubernetes names and labels for pod UIDs, produced by the site.

cgroups give a process's pod UID; names and labels live in the API server. Rather than talk to
Kubernetes, gpulens reads a JSON file a site writes (from the kubelet's /pods endpoint, a
DaemonSet sidecar, or `kubectl get pods -o json` filtered by node):

```json
{"6f2c1a3e-...": {"pod": "llm-0", "namespace": "serving", "container": "vllm",
                  "containers": {"<container id or 12-hex short id>": "vllm"},
                  "inference_engine": "vllm", "gpulens.io/team": "search",
                  "labels": {"app": "llm"}}}
```

Record keys may be flat or under `labels`. Used: `pod`, `namespace`, `container` (or the
`containers` id → name map, which wins), `inference_engine` or `gpulens.io/engine` → engine,
and `gpulens.io/<label>` for any attribution label (`gpulens.model.ATTRIBUTION_LABELS`: team,
project, user, job_id...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulens.errors import ConfigError
from gpulens.model import ATTRIBUTION_LABELS

_PREFIX = "gpulens.io/"
_ENGINE_KEYS = ("gpulens.io/engine", "inference_engine")

PodTable = dict[str, dict[str, Any]]


def parse_pod_labels(text: str, source: str = "<pod labels>") -> PodTable:
    """Pod UID (normalised to lowercase, dashes) → record. ConfigError names the file."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"pod labels file {source!r} is not valid JSON ({exc}); expected an object mapping "
            'pod UID to {"pod": ..., "namespace": ..., ...}: fix or regenerate the file'
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"pod labels file {source!r} holds a JSON {type(data).__name__}; expected an object "
            "mapping pod UID to a record: fix or regenerate the file"
        )
    return {
        str(uid).lower().replace("_", "-"): record
        for uid, record in data.items()
        if isinstance(record, dict)
    }


def pod_labels(record: Mapping[str, Any], container_id: str | None) -> dict[str, str]:
    """Identity labels from one pod record, for the container with `container_id` (full id)."""
    flat: dict[str, Any] = {}
    nested = record.get("labels")
    if isinstance(nested, dict):
        flat.update(nested)
    flat.update({k: v for k, v in record.items() if k != "labels"})
    out: dict[str, str] = {}
    for key in ("pod", "namespace", "container"):
        if isinstance(flat.get(key), str) and flat[key]:
            out[key] = flat[key]
    containers = flat.get("containers")
    if container_id and isinstance(containers, dict):
        for cid, name in containers.items():
            if isinstance(name, str) and str(cid) in (container_id, container_id[:12]):
                out["container"] = name
    for key, value in flat.items():
        name = key[len(_PREFIX) :]
        if (
            key.startswith(_PREFIX)
            and name in ATTRIBUTION_LABELS
            and isinstance(value, str)
            and value
        ):
            out[name] = value
    for key in _ENGINE_KEYS:
        if isinstance(flat.get(key), str) and flat[key]:
            out["engine"] = flat[key]
            break
    return out


class PodLabelsFile:
    """The file, re-read when its modification time changes (checked by `refresh()`).

    A file that is missing or broken after start keeps the last good table and counts an
    error; `generation` increases on every successful reload so caches can tell.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.errors = 0
        self.generation = 0
        self._mtime: int | None = None
        self._table: PodTable = {}
        if path.exists():
            self._load(strict=True)

    def _load(self, strict: bool) -> None:
        try:
            stat = self.path.stat()
            if stat.st_mtime_ns == self._mtime:
                return
            table = parse_pod_labels(self.path.read_text(encoding="utf-8"), str(self.path))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            if strict and not isinstance(exc, FileNotFoundError):
                if isinstance(exc, ConfigError):
                    raise
                raise ConfigError(
                    f"pod labels file {str(self.path)!r} cannot be read ({exc}); make it "
                    "readable by gpulens or leave pod_labels_file unset"
                ) from exc
            self.errors += 0 if isinstance(exc, FileNotFoundError) else 1
            return
        self._mtime, self._table = stat.st_mtime_ns, table
        self.generation += 1

    def refresh(self) -> None:
        """Reload when the file changed since the last read."""
        self._load(strict=False)

    def lookup(self, pod_uid: str, container_id: str | None) -> dict[str, str]:
        """Identity labels for a pod UID (and container), {} when the pod is not listed."""
        record = self._table.get(pod_uid.lower())
        return pod_labels(record, container_id) if record is not None else {}
