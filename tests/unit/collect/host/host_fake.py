"""A psutil-shaped fake: the same call signatures and named tuples, driven by the test."""

from __future__ import annotations

import contextlib
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

scputimes = namedtuple(
    "scputimes",
    "user nice system idle iowait irq softirq steal guest guest_nice",
)
svmem = namedtuple("svmem", "total available percent used free")
sdiskio = namedtuple(
    "sdiskio", "read_count write_count read_bytes write_bytes read_time write_time"
)
snetio = namedtuple(
    "snetio", "bytes_sent bytes_recv packets_sent packets_recv errin errout dropin dropout"
)
pcputimes = namedtuple("pcputimes", "user system children_user children_system iowait")
pmem = namedtuple("pmem", "rss vms shared text lib data dirty")
pio = namedtuple("pio", "read_count write_count read_bytes write_bytes read_chars write_chars")


def cpu(user: float, system: float, idle: float, iowait: float = 0.0, guest: float = 0.0) -> Any:
    return scputimes(user, 0.0, system, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


class Error(Exception):
    pass


class NoSuchProcess(Error):
    pass


class AccessDenied(Error):
    pass


class FakeProcess:
    def __init__(self, psutil: FakePsutil, pid: int) -> None:
        self._ps = psutil
        self.pid = pid
        if pid not in psutil.procs:
            raise NoSuchProcess(pid)

    @contextlib.contextmanager
    def oneshot(self) -> Iterator[None]:
        yield

    def _get(self, key: str) -> Any:
        value = self._ps.procs[self.pid][key]
        if isinstance(value, BaseException):
            raise value
        return value

    def cpu_times(self) -> Any:
        return self._get("cpu")

    def memory_info(self) -> Any:
        return self._get("mem")

    def io_counters(self) -> Any:
        return self._get("io")


class FakePsutil:
    """Set the attributes, then let the collector call it like psutil."""

    Error = Error
    NoSuchProcess = NoSuchProcess
    AccessDenied = AccessDenied

    def __init__(self) -> None:
        self.total = cpu(100, 50, 850, 0)
        self.percpu = [cpu(50, 25, 425), cpu(50, 25, 425)]
        self.vm = svmem(64 * 2**30, 48 * 2**30, 25.0, 10 * 2**30, 40 * 2**30)
        self.load: Any = (3.5, 2.0, 1.0)
        self.count: int | None = 2
        self.disks: dict[str, Any] | None = {
            "sda": sdiskio(10, 20, 4096, 8192, 0, 0),
            "sda1": sdiskio(9, 19, 4000, 8000, 0, 0),
            "nvme0n1": sdiskio(100, 200, 1 << 20, 2 << 20, 0, 0),
            "nvme0n1p1": sdiskio(1, 1, 1, 1, 0, 0),
            "loop0": sdiskio(1, 0, 512, 0, 0, 0),
        }
        self.nics: dict[str, Any] | None = {
            "lo": snetio(5, 5, 1, 1, 0, 0, 0, 0),
            "eth0": snetio(1000, 2000, 10, 20, 0, 0, 0, 0),
        }
        self.procs: dict[int, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail: set[str] = set()

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise OSError(5, f"{name} failed")

    def cpu_times(self, percpu: bool = False) -> Any:
        self._call("cpu_times_percpu" if percpu else "cpu_times")
        return list(self.percpu) if percpu else self.total

    def virtual_memory(self) -> Any:
        self._call("virtual_memory")
        return self.vm

    def getloadavg(self) -> Any:
        self._call("getloadavg")
        return self.load

    def cpu_count(self, logical: bool = True) -> int | None:
        self._call("cpu_count")
        return self.count

    def disk_io_counters(self, perdisk: bool = False, nowrap: bool = True) -> Any:
        self._call("disk_io_counters")
        return self.disks

    def net_io_counters(self, pernic: bool = False, nowrap: bool = True) -> Any:
        self._call("net_io_counters")
        return self.nics

    def Process(self, pid: int) -> FakeProcess:  # noqa: N802 - psutil's name
        return FakeProcess(self, pid)
