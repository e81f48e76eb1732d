"""ProcAttribution: the real ProcessIdentity, from /proc (cgroups, environment, command line).

For a host PID it reads `stat` (start time), `status` (uid, NSpid), `cmdline`, `cgroup`,
`environ` (a few keys) and, only when needed, `maps` (engine libraries), and turns them into
identity labels. Results are cached per (pid, start time): a repeated tick costs one read of
`/proc/<pid>/stat`, and a reused PID (same number, new start time) is resolved afresh.

Label precedence, strongest first: `GPULENS_LABELS` in the process environment, then the pod
labels file, then what /proc shows (detection). A fact that cannot be read is left out, never
guessed, and identify() never raises.
"""

from __future__ import annotations

import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from gpulens import units
from gpulens.clock import Clock, SystemClock
from gpulens.collect.procs import engine as engines
from gpulens.collect.procs.hpc import HpcJobMapping
from gpulens.collect.procs.kube import PodLabelsFile
from gpulens.collect.procs.parse import (
    ENVIRON_KEYS,
    CgroupFacts,
    Status,
    environ_labels,
    parse_cgroup,
    parse_cmdline,
    parse_environ,
    parse_stat_start,
    parse_status,
    process_name,
)
from gpulens.collect.procs.procfs import PidNamespaceView, ProcFS, inspect_pid_namespace

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _passwd_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """Everything attribution learned about one process (labels are derived from this).

    `container_pid` is the PID inside the process's own namespace (last NSpid entry) when it
    runs in a nested PID namespace. `engine_evidence` is "GPULENS_LABELS", "pod", "cmdline",
    "maps", "none" (looked, found nothing: engine "unknown") or "unreadable" (maps could not be
    read, engine left out). `denied` lists the files that could not be read.
    """

    pid: int
    start_ticks: int
    uid: int | None
    process_name: str | None
    nspid: tuple[int, ...]
    cgroup: CgroupFacts
    slurm: Mapping[str, str]
    explicit: Mapping[str, str]
    pod: Mapping[str, str]
    engine: str | None
    engine_evidence: str
    denied: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def container_pid(self) -> int | None:
        return self.nspid[-1] if len(self.nspid) > 1 else None


@dataclass(slots=True)
class _Entry:
    start: int
    pod_generation: int
    facts: ProcessFacts


class ProcAttribution:
    """Implements ProcessIdentity over a proc tree (`proc_root`, default /proc).

    `hpc_job_mapping_dir`: dcgm-exporter's per-GPU job files (see `jobs_for_gpu`).
    `pod_labels_file`: JSON pod UID → names/labels (see gpulens.collect.procs.kube); re-read
    when it changes, checked at most every `pod_refresh_s` of `clock` time.
    `user_name`: uid → user name (default: the passwd database, results cached).
    `assume_host_pids`: override the PID-namespace check (None = detect, see `namespace`).
    `read_maps`: False skips the shared-library scan (engine then comes from the command line).
    `procfs`: a ready ProcFS to read through instead of one over `proc_root` (tests use a
    subclass that refuses some files).
    """

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        hpc_job_mapping_dir: Path | None = None,
        pod_labels_file: Path | None = None,
        *,
        user_name: Callable[[int], str | None] = _passwd_name,
        clock: Clock | None = None,
        pod_refresh_s: float = 10.0,
        assume_host_pids: bool | None = None,
        read_maps: bool = True,
        max_entries: int = 4096,
        procfs: ProcFS | None = None,
    ) -> None:
        self._fs = procfs if procfs is not None else ProcFS(Path(proc_root))
        self._hpc = HpcJobMapping(hpc_job_mapping_dir) if hpc_job_mapping_dir else None
        self._pods = PodLabelsFile(pod_labels_file) if pod_labels_file else None
        self._user_name = user_name
        self._users: dict[int, str | None] = {}
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._pod_refresh_ns = units.s_to_ns(pod_refresh_s)
        self._pod_checked_ns: int | None = None
        self._read_maps = read_maps
        self._max_entries = max_entries
        self._cache: dict[int, _Entry] = {}
        self.counters: dict[str, int] = dict.fromkeys(
            ("hits", "misses", "vanished", "reused", "raced", "maps_bytes", "errors"), 0
        )
        view = inspect_pid_namespace(self._fs)
        if assume_host_pids is not None and assume_host_pids != view.sees_host_pids:
            view = PidNamespaceView(
                assume_host_pids,
                f"set by assume_host_pids={assume_host_pids} (detected: {view.reason})",
                view.self_nspid,
                view.self_container,
            )
        self.namespace: PidNamespaceView = view

    # -- public ---------------------------------------------------------------------------------
    @property
    def sees_host_pids(self) -> bool:
        """Whether PIDs under proc_root are the host PIDs NVML reports; when False, identify()
        returns {} for every PID and `namespace.reason` says how to fix it."""
        return self.namespace.sees_host_pids

    @property
    def denied(self) -> Mapping[str, int]:
        """Per /proc file name, how many reads were refused (EACCES/EPERM)."""
        return MappingProxyType(self._fs.denied)

    def identify(self, pid: int) -> Mapping[str, str]:
        """Identity labels of host PID `pid`; {} when unknown (vanished, not visible, raced)."""
        facts = self.facts(pid)
        return facts.labels if facts is not None else _EMPTY

    def facts(self, pid: int) -> ProcessFacts | None:
        """All facts about `pid` (cached per start time); None when the PID cannot be resolved."""
        if not self.namespace.sees_host_pids:
            return None
        try:
            return self._facts(pid)
        except Exception:  # the contract: attribution never breaks a collection
            self.counters["errors"] += 1
            return None

    def jobs_for_gpu(self, gpu_index: str) -> list[str]:
        """Job ids on GPU `gpu_index` from the HPC job mapping dir ([] when not configured).

        Integration point for the NVML collector: when a GPU reading has no `job_id` from its
        processes, `jobs_for_gpu(labels["gpu_index"])` (or "<gpu>.<gi>" for a MIG instance)
        names the batch job that holds the device, as dcgm-exporter's `hpc_job` label does.
        """
        return self._hpc.jobs_for_gpu(gpu_index) if self._hpc is not None else []

    def forget(self, pid: int) -> None:
        """Drop the cached identity of `pid` (e.g. when NVML stops reporting it)."""
        self._cache.pop(pid, None)

    # -- resolution -----------------------------------------------------------------------------
    def _pod_generation(self) -> int:
        if self._pods is None:
            return 0
        now = self._clock.now_ns()
        if self._pod_checked_ns is None or now - self._pod_checked_ns >= self._pod_refresh_ns:
            self._pod_checked_ns = now
            self._pods.refresh()
        return self._pods.generation

    def _start(self, pid: int) -> int | None:
        data = self._fs.read(pid, "stat")
        return parse_stat_start(data) if data is not None else None

    def _facts(self, pid: int) -> ProcessFacts | None:
        start = self._start(pid)
        if start is None:
            self._cache.pop(pid, None)
            self.counters["vanished"] += 1
            return None
        generation = self._pod_generation()
        entry = self._cache.get(pid)
        if entry is not None:
            if entry.start == start and (
                entry.pod_generation == generation or entry.facts.cgroup.pod_uid is None
            ):
                self.counters["hits"] += 1
                return entry.facts
            if entry.start != start:
                self.counters["reused"] += 1
        self.counters["misses"] += 1
        facts = self._resolve(pid, start)
        if self._start(pid) != start:  # exited or reused while we read: do not trust facts
            self.counters["raced"] += 1
            self._cache.pop(pid, None)
            return None
        self._cache.pop(pid, None)
        if len(self._cache) >= self._max_entries:
            self._cache.pop(next(iter(self._cache)))
        self._cache[pid] = _Entry(start, generation, facts)
        return facts

    def _user(self, uid: int) -> str | None:
        if uid not in self._users:
            self._users[uid] = self._user_name(uid)
        return self._users[uid]

    def _resolve(self, pid: int, start: int) -> ProcessFacts:
        fs = self._fs
        denied: list[str] = []

        def read(name: str) -> str | None:
            before = fs.denied.get(name, 0)
            text = fs.read_text(pid, name)
            if fs.denied.get(name, 0) > before:
                denied.append(name)
            return text

        status_text = read("status")
        status = parse_status(status_text) if status_text is not None else Status()
        cmdline = fs.read(pid, "cmdline")
        args = parse_cmdline(cmdline) if cmdline is not None else []
        cgroup_text = read("cgroup")
        cgroup = parse_cgroup(cgroup_text) if cgroup_text is not None else CgroupFacts()
        environ = fs.read(pid, "environ")
        if environ is None and fs.denied.get("environ"):
            denied.append("environ")
        env = parse_environ(environ, ENVIRON_KEYS) if environ is not None else {}
        explicit, slurm = environ_labels(env)
        pod: dict[str, str] = {}
        if self._pods is not None and cgroup.pod_uid is not None:
            pod = self._pods.lookup(cgroup.pod_uid, cgroup.container_id)
        engine, evidence = self._engine(pid, args, explicit, pod, denied)

        base: dict[str, str] = {}
        name = process_name(args, status.name)
        if name:
            base["process_name"] = name
        user = self._user(status.uid) if status.uid is not None else None
        user = user or slurm.get("user") or (str(status.uid) if status.uid is not None else None)
        if user:
            base["user"] = user
        job = cgroup.job_id or slurm.get("job_id")
        if job:
            base["job_id"] = job
        if slurm.get("project"):
            base["project"] = slurm["project"]
        if cgroup.container_short:
            base["container"] = cgroup.container_short
        if cgroup.pod_uid:
            base["pod_uid"] = cgroup.pod_uid
        if engine is not None:
            base["engine"] = engine
        labels = {**base, **pod, **explicit}
        return ProcessFacts(
            pid=pid,
            start_ticks=start,
            uid=status.uid,
            process_name=name,
            nspid=status.nspid,
            cgroup=cgroup,
            slurm=MappingProxyType(slurm),
            explicit=MappingProxyType(explicit),
            pod=MappingProxyType(pod),
            engine=labels.get("engine"),
            engine_evidence=evidence,
            denied=tuple(denied),
            labels=MappingProxyType(labels),
        )

    def _engine(
        self,
        pid: int,
        args: list[str],
        explicit: Mapping[str, str],
        pod: Mapping[str, str],
        denied: list[str],
    ) -> tuple[str | None, str]:
        """(engine, evidence); explicit labels skip the maps scan altogether."""
        if "engine" in explicit:
            return explicit["engine"], "GPULENS_LABELS"
        if "engine" in pod:
            return pod["engine"], "pod"
        by_cmd = engines.from_cmdline(args)
        if self._read_maps and engines.maps_can_improve(by_cmd):
            chunks = self._fs.chunks(pid, "maps")
            if chunks is None:
                if self._fs.denied.get("maps"):
                    denied.append("maps")
                return (by_cmd, "cmdline") if by_cmd else (None, "unreadable")
            by_maps, scanned = engines.from_maps(chunks, better_than=by_cmd)
            chunks.close()
            self.counters["maps_bytes"] += scanned
            if by_maps is not None:
                return by_maps, "maps"
        if by_cmd is not None:
            return by_cmd, "cmdline"
        return engines.UNKNOWN, "none"
