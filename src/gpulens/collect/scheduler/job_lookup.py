"""One job as its scheduler recorded it: when it ran, where, on which GPUs, for whom (pure
parse; `read_job` and `run_job_lookup` fetch).

Sources: Slurm JSON (``sacct --json``, ``squeue --json`` and slurmrestd, data_parser v0.0.37
to v0.0.44) and Kubernetes pods (``kubectl get pod -o json|yaml``, a List or a dump of many).

- **Time range.** Accounting records carry ``time.start``/``time.end``; a job that ended
  without an end time (``NODE_FAIL`` on some versions writes 0) ends at start + elapsed. A
  job still running has no end (the caller reports it up to now). A pod runs from
  ``status.startTime`` to the last ``finishedAt`` of its containers.
- **Nodes.** A Slurm hostlist (``gpu[1-2,7],cn01``) is expanded; a pod has one node.
- **GPUs.** The count is `slurm.job_gpus` (TRES, or gres_detail / tres_per_node / the
  submit line on clusters whose TRES leave GPUs out). The indices per node come from
  ``gres_detail`` (``gpu:h100:4(IDX:0-3)``, one entry per node) when the record has it
  (squeue and slurmrestd); sacct records do not, and the caller then finds the GPUs by the
  series' job label or by the node's GPU count.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.kubernetes import iso_seconds, pod_gpus
from gpulens.collect.scheduler.slurm import epoch_seconds, job_gpus, job_state, number
from gpulens.errors import CollectError

#: the command `report --job` runs when no file is given (``{job}`` is the job id)
SACCT_COMMAND = "sacct --json --allusers --jobs {job}"
KUBECTL_COMMAND = "kubectl get pod {name} --namespace {namespace} -o json"
RUNNING_STATES = frozenset({"RUNNING", "PENDING", "SUSPENDED", "CONFIGURING", "COMPLETING"})
_IDX = re.compile(r"IDX:([0-9,\-N/A]+)\)")


class JobNotFound(CollectError):
    """The scheduler's record holds no job of that id."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job (or pod): `end_s` None while it runs; `gpu_indices` node → GPU indices where the
    scheduler says which (absent: unknown); `gpus` the total it held."""

    job_id: str
    source: str
    state: str
    start_s: float | None
    end_s: float | None
    nodes: tuple[str, ...]
    gpus: float
    gpu_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    user: str | None = None
    team: str | None = None  # Slurm account, Kubernetes namespace
    partition: str | None = None
    qos: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # a pod's labels

    @property
    def running(self) -> bool:
        return self.end_s is None


def expand_hostlist(text: str) -> list[str]:
    """``gpu[1-2,07],cn1`` → [gpu1, gpu2, gpu07, cn1] (zero padding kept; nested ranges in
    one name, ``r[1-2]n[1-2]``, expand as a product)."""
    out: list[str] = []
    for item in _split_top(text):
        out.extend(_expand_one(item))
    return out


def _split_top(text: str) -> list[str]:
    parts, cur, depth = [], "", 0
    for ch in text.strip():
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _expand_one(name: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", name)
    if m is None:
        return [name]
    head, tail = name[: m.start()], name[m.end() :]
    out = []
    for piece in m.group(1).split(","):
        lo, _, hi = piece.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a Slurm hostlist range: {piece!r} in {name!r}")
        width = len(lo)
        for i in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{i:0{width}d}{tail}"))
    return out


def _indices(detail: str) -> tuple[int, ...] | None:
    m = _IDX.search(detail)
    if m is None or "N/A" in m.group(1):
        return None
    out: list[int] = []
    for piece in m.group(1).split(","):
        lo, _, hi = piece.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a GPU index range: {piece!r} in {detail!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def slurm_record(job: Mapping[str, Any], source: str) -> JobRecord:
    """The record of one job object of a Slurm JSON document (either shape)."""
    accounting = isinstance(job.get("state"), Mapping)
    state = job_state(job.get("state") if accounting else job.get("job_state"))
    raw = job.get("time")
    times: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if accounting:
        start, end = epoch_seconds(times.get("start")), epoch_seconds(times.get("end"))
        elapsed = epoch_seconds(times.get("elapsed"))
        if end is None and start is not None and elapsed and state not in RUNNING_STATES:
            end = start + elapsed
    else:  # squeue: a running job's end_time is its time limit, a forecast
        start, end = epoch_seconds(job.get("start_time")), epoch_seconds(job.get("end_time"))
    if state in RUNNING_STATES:
        end = None
    if state == "PENDING":
        start = None
    hosts = str(job.get("nodes") or "")
    nodes = () if hosts in ("", "None assigned") else tuple(expand_hostlist(hosts))
    details = job.get("gres_detail")
    indices: dict[str, tuple[int, ...]] = {}
    if isinstance(details, list) and len(details) == len(nodes):
        for node, detail in zip(nodes, details, strict=True):
            found = _indices(str(detail))
            if found is not None:
                indices[node] = found
    user = job.get("user_name") if "user_name" in job else job.get("user")
    return JobRecord(
        job_id=str(job.get("job_id", "")),
        source=source,
        state=state,
        start_s=start,
        end_s=end,
        nodes=nodes,
        gpus=job_gpus(job),
        gpu_indices=indices,
        user=str(user) if user else None,
        team=str(job.get("account") or "") or None,
        partition=str(job.get("partition") or "") or None,
        qos=str(job.get("qos") or "") or None,
    )


def pod_record(pod: Mapping[str, Any], source: str) -> JobRecord:
    """The record of one Pod object: its namespace/name, node, GPUs, start and finish."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    finished = []
    statuses = [*(status.get("containerStatuses") or [])]
    statuses += status.get("initContainerStatuses") or []
    for cs in statuses:
        done = iso_seconds(((cs or {}).get("state") or {}).get("terminated", {}).get("finishedAt"))
        if done is not None:
            finished.append(done)
    ended = phase in ("Succeeded", "Failed")
    node = spec.get("nodeName")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return JobRecord(
        job_id=f"{meta.get('namespace', 'default')}/{meta.get('name', '')}",
        source=source,
        state={"Succeeded": "COMPLETED"}.get(phase, phase.upper()),
        start_s=iso_seconds(status.get("startTime")) if phase != "Pending" else None,
        end_s=max(finished) if ended and finished else None,
        nodes=(str(node),) if node else (),
        gpus=pod_gpus(spec),
        user=labels.get("user") or labels.get("app.kubernetes.io/created-by"),
        team=str(meta.get("namespace") or "default"),
        labels=labels,
    )


def _pods(doc: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(doc, Mapping):
        if isinstance(doc.get("items"), list):
            for item in doc["items"]:
                yield from _pods(item)
        elif doc.get("kind") == "Pod":
            yield doc
    elif isinstance(doc, list):
        for item in doc:
            yield from _pods(item)


def _slurm_ids(job: Mapping[str, Any]) -> set[str]:
    """The ids a Slurm job answers to: its own, and ``ARRAYID_TASK`` for an array task."""
    ids = {str(job.get("job_id", ""))}
    raw = job.get("array")
    array: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    parent = number(array.get("job_id", job.get("array_job_id")))
    task = number(array.get("task_id", job.get("array_task_id")))
    if parent and task is not None:
        ids.add(f"{parent:.0f}_{task:.0f}")
    return ids


def find_job(docs: Sequence[Any], job_id: str, source: str) -> JobRecord:
    """The job `job_id` in decoded Slurm JSON or Kubernetes documents (a pod by
    ``namespace/name`` or by its name alone when that is unique). A Slurm job that was
    requeued appears once per run: the latest run is taken."""
    found: list[JobRecord] = []
    pods = 0
    for doc in docs:
        if isinstance(doc, Mapping) and isinstance(doc.get("jobs"), list):
            for job in doc["jobs"]:
                if isinstance(job, Mapping) and job_id in _slurm_ids(job):
                    try:
                        found.append(slurm_record(job, source))
                    except ValueError as exc:  # a hostlist or GPU index that is not one
                        raise SchedulerInputError(source, f"job {job_id}: {exc}", _FIX) from None
            continue
        for pod in _pods(doc):
            pods += 1
            meta = pod.get("metadata") or {}
            full = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
            if job_id in (full, str(meta.get("name", ""))):
                found.append(pod_record(pod, source))
    if not found:
        what = f"{pods} pod(s)" if pods else "its jobs"
        raise JobNotFound(
            f"job {job_id!r} is not in {source} (looked among {what}): check the job id "
            "(Slurm: the number sacct shows; Kubernetes: namespace/pod) and that the record "
            "covers the job (sacct --starttime for old jobs)"
        )
    if len({r.job_id for r in found}) > 1:
        names = ", ".join(sorted({r.job_id for r in found}))
        raise SchedulerInputError(
            source, f"{job_id!r} names several pods ({names})", "Give it as namespace/pod"
        )
    return max(found, key=lambda r: r.start_s or 0.0)


def _decode(data: bytes, source: str) -> list[Any]:
    try:
        return [json.loads(data)]
    except ValueError:
        pass
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise SchedulerInputError(
            source, "it is not JSON, and reading YAML needs PyYAML", "Pass JSON"
        ) from None
    try:
        return [d for d in yaml.safe_load_all(data) if d is not None]
    except yaml.YAMLError as exc:
        raise SchedulerInputError(source, f"not JSON or YAML ({exc})", _FIX) from None


_FIX = (
    "Pass the output of `sacct --json --jobs ID` (or squeue --json, slurmrestd), or of "
    "`kubectl get pod NAME -n NAMESPACE -o json`"
)


def read_job(path: Path, job_id: str) -> JobRecord:
    """`find_job` in a file of Slurm JSON or Kubernetes JSON/YAML."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SchedulerInputError(str(path), f"not readable ({exc.strerror})", _FIX) from None
    return find_job(_decode(data, str(path)), job_id, str(path))


def run_job_lookup(command: str, job_id: str, timeout_s: float = 60.0) -> JobRecord:
    """Run `command` and `find_job` in its output: ``{job}`` is replaced by the job id,
    ``{namespace}`` and ``{name}`` by the two halves of ``namespace/pod`` (`KUBECTL_COMMAND`)."""
    namespace, _, name = job_id.rpartition("/")
    fields = {"{job}": job_id, "{namespace}": namespace or "default", "{name}": name}
    args = []
    try:
        words = shlex.split(command)
    except ValueError as exc:  # unbalanced quotes
        raise SchedulerInputError("the job lookup command", str(exc), _FIX) from None
    for arg in words:
        for key, value in fields.items():
            arg = arg.replace(key, value)
        args.append(arg)
    if not args:
        raise SchedulerInputError("the job lookup command", "it is empty", _FIX)
    binary = shutil.which(args[0])
    if binary is None:
        raise SchedulerInputError(
            args[0],
            "the command is not on PATH",
            "Run this on a Slurm login node (or with kubectl configured), or pass the "
            "record as a file with --sacct FILE / --k8s FILE",
        )
    shown = " ".join(args)
    try:
        done = subprocess.run([binary, *args[1:]], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SchedulerInputError(shown, f"it failed ({exc})", _FIX) from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise SchedulerInputError(shown, f"it exited {done.returncode}: {detail}", _FIX)
    return find_job(_decode(done.stdout, shown), job_id, shown)
