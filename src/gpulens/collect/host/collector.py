"""HostCollector: host CPU, memory, load, disk and network, plus GPU processes' host counters.

Fetch is psutil (the only `import psutil` in gpulens, done lazily so a test can pass a fake
module); parse is `gpulens.collect.host.parse`. CPU ratios come from cpu_times deltas between
ticks; the first tick measures from construction time. Disk and network values are COUNTERS
(`*_total`): the pipeline's rate stage turns them into per-second gauges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from gpulens.collect.host import parse
from gpulens.collect.procs.identity import ProcessIdentity
from gpulens.errors import SourceUnavailable
from gpulens.model import FrozenLabels, Kind, Reading

_INSTALL_HINT = "install it with `pip install psutil` (it is a gpulens dependency)"


def _load_psutil() -> Any:
    try:
        import psutil
    except ImportError as exc:
        raise SourceUnavailable(
            f"the host collector needs psutil ({exc}); {_INSTALL_HINT}"
        ) from exc
    return psutil


def _classes(module: Any, *names: str) -> tuple[type[BaseException], ...]:
    """The exception classes `module` defines under `names` (a fake module may lack some)."""
    found = (getattr(module, n, None) for n in names)
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, BaseException))


class HostCollector:
    """One tick = one HOST reading for the machine, one per CPU core (`cpu` label), one per
    disk (`device`), one per network interface (`interface`), and one PROCESS reading per PID
    that `gpu_pids()` returns (labels `host`, `pid`, plus identity labels when `identity` is
    given).

    `skip_disks` / `skip_interfaces` are glob patterns of device and interface names to leave
    out. Section failures (a psutil call that raises) leave that section's metrics out of the
    tick and are counted in `errors`; a process that vanished or is not readable is skipped and
    counted in `skipped_processes`.
    """

    def __init__(
        self,
        host: str,
        gpu_pids: Callable[[], Iterable[int]] | None = None,
        psutil_module: Any = None,
        name: str = "host",
        *,
        identity: ProcessIdentity | None = None,
        per_cpu: bool = True,
        skip_disks: Sequence[str] = ("loop*", "ram*"),
        skip_interfaces: Sequence[str] = ("lo",),
    ) -> None:
        self.name = name
        self.errors: dict[str, int] = {}
        self.skipped_processes = 0
        self._ps = psutil_module if psutil_module is not None else _load_psutil()
        self._host = host
        self._gpu_pids = gpu_pids
        self._identity = identity
        self._per_cpu = per_cpu
        self._skip_disks = tuple(skip_disks)
        self._skip_interfaces = tuple(skip_interfaces)
        self._host_labels: Mapping[str, str] = FrozenLabels({"host": host})
        self._labels: dict[tuple[str, str], Mapping[str, str]] = {}
        self._expected: tuple[type[BaseException], ...] = (
            OSError,
            RuntimeError,
            *_classes(self._ps, "Error"),
        )
        self._gone: tuple[type[BaseException], ...] = (
            *_classes(self._ps, "NoSuchProcess", "AccessDenied"),
            ProcessLookupError,
            PermissionError,
            FileNotFoundError,
        )
        self._cpu_prev: Any = self._guard("cpu", lambda: self._ps.cpu_times())
        self._percpu_prev: Any = (
            self._guard("per_cpu", lambda: self._ps.cpu_times(percpu=True)) if per_cpu else None
        )
        self._closed = False

    # -- helpers --------------------------------------------------------------------------------
    def _count(self, section: str) -> None:
        self.errors[section] = self.errors.get(section, 0) + 1

    def _guard(self, section: str, call: Callable[[], Any]) -> Any:
        """Run one psutil call; a failure is counted under `section` and yields None."""
        try:
            return call()
        except self._expected:
            self._count(section)
            return None

    def _labelled(self, key: str, value: str) -> Mapping[str, str]:
        labels = self._labels.get((key, value))
        if labels is None:
            labels = FrozenLabels({"host": self._host, key: value})
            self._labels[(key, value)] = labels
        return labels

    # -- collection -----------------------------------------------------------------------------
    def collect(self, now_ns: int) -> list[Reading]:
        """The readings of one tick at `now_ns` (UTC ns)."""
        out: list[Reading] = []
        host_values: parse.Values = {}
        cur = self._guard("cpu", lambda: self._ps.cpu_times())
        if cur is not None:
            host_values["host_cpu_seconds_total"] = parse.cpu_busy_seconds(cur)
            if self._cpu_prev is not None:
                host_values.update(parse.cpu_ratios(self._cpu_prev, cur))
            self._cpu_prev = cur
        vm = self._guard("memory", lambda: self._ps.virtual_memory())
        if vm is not None:
            host_values.update(parse.memory_values(vm))
        load = self._guard("load", lambda: self._ps.getloadavg())
        count = self._guard("cpu_count", lambda: self._ps.cpu_count(logical=True))
        host_values.update(parse.load_values(load, count))
        if host_values:
            out.append(Reading(Kind.HOST, now_ns, self._host_labels, host_values))
        if self._per_cpu:
            out.extend(self._per_cpu_readings(now_ns))
        disks = self._guard("disk", lambda: self._ps.disk_io_counters(perdisk=True, nowrap=True))
        for device, values in parse.disk_values(disks, self._skip_disks).items():
            out.append(Reading(Kind.HOST, now_ns, self._labelled("device", device), values))
        nics = self._guard("network", lambda: self._ps.net_io_counters(pernic=True, nowrap=True))
        for nic, values in parse.network_values(nics, self._skip_interfaces).items():
            out.append(Reading(Kind.HOST, now_ns, self._labelled("interface", nic), values))
        if self._gpu_pids is not None:
            out.extend(self._process_readings(now_ns))
        return out

    def _per_cpu_readings(self, now_ns: int) -> list[Reading]:
        cur = self._guard("per_cpu", lambda: self._ps.cpu_times(percpu=True))
        if cur is None:
            return []
        prev, self._percpu_prev = self._percpu_prev, cur
        if prev is None:
            return []
        return [
            Reading(Kind.HOST, now_ns, self._labelled("cpu", cpu), {"host_cpu_util_ratio": ratio})
            for cpu, ratio in parse.per_cpu_ratios(prev, cur).items()
        ]

    def _process_readings(self, now_ns: int) -> list[Reading]:
        source = self._gpu_pids
        assert source is not None
        pids = self._guard("gpu_pids", lambda: sorted(set(source())))
        out = []
        for pid in pids or ():
            values = self._process_values(pid)
            if not values:
                self.skipped_processes += 1
                continue
            labels: dict[str, str] = {"host": self._host, "pid": str(pid)}
            if self._identity is not None:
                for key, value in self._identity.identify(pid).items():
                    labels.setdefault(key, value)
            out.append(Reading(Kind.PROCESS, now_ns, MappingProxyType(labels), values))
        return out

    def _process_values(self, pid: int) -> parse.Values:
        """Host counters of one process; {} when it vanished or nothing of it is readable.

        Reads are independent: another user's process usually gives CPU and RSS (world-readable
        /proc/<pid>/stat) but refuses I/O counters unless gpulens runs as root; those stay absent.
        """
        try:
            proc = self._ps.Process(pid)
        except self._gone:
            return {}
        values: parse.Values = {}
        reads: tuple[tuple[str, Callable[[Any], parse.Values]], ...] = (
            ("cpu_times", parse.process_cpu_values),
            ("memory_info", parse.process_memory_values),
            ("io_counters", parse.process_io_values),
        )
        with proc.oneshot():
            for method, convert in reads:
                call = getattr(proc, method, None)
                if call is None:  # e.g. io_counters does not exist on macOS
                    continue
                try:
                    values.update(convert(call()))
                except self._gone:
                    continue
                except self._expected:
                    self._count(f"process_{method}")
        return values

    def close(self) -> None:
        """Nothing to release (psutil holds no handles); idempotent."""
        self._closed = True
