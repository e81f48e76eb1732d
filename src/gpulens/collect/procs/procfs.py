"""Reading /proc (or a copy of it under any root): the fetch half of attribution.

`ProcFS` turns the ways a /proc read fails into absent facts plus counters: a file that is
gone (the process exited, ENOENT/ESRCH) is `None`; a file gpulens may not read (another user's
`environ` or `maps` without root, EACCES/EPERM) is `None` and counted in `denied[file]`.
Nothing here raises for a missing or forbidden file.

`inspect_pid_namespace` answers the question every PID-based attribution depends on: are the
PIDs under this root the host PIDs that NVML reports?
"""

from __future__ import annotations

import errno
import io
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpulens.collect.procs.parse import parse_cgroup, parse_status

Chunks = Generator[bytes, None, None]

_GONE = frozenset({errno.ENOENT, errno.ESRCH, errno.ENOTDIR})


class ProcFS:
    """Reads files under `root` (default /proc); counts denials and other failures."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root
        self._prefix = f"{root}/"
        self.denied: dict[str, int] = {}
        self.errors: dict[str, int] = {}

    def _failed(self, name: str, exc: OSError) -> None:
        if exc.errno in _GONE:
            return
        table = self.denied if isinstance(exc, PermissionError) else self.errors
        table[name] = table.get(name, 0) + 1

    def open(self, pid: int | str, name: str) -> BinaryIO:
        """Open `<root>/<pid>/<name>` unbuffered; the one place files are opened (a test may
        override it to simulate EACCES, which root cannot get from file modes)."""
        return io.FileIO(f"{self._prefix}{pid}/{name}", "rb")

    def read(self, pid: int | str, name: str) -> bytes | None:
        """The whole of `<root>/<pid>/<name>`, or None when gone or not readable."""
        try:
            with self.open(pid, name) as handle:
                return handle.read()
        except OSError as exc:
            self._failed(name, exc)
            return None

    def read_text(self, pid: int | str, name: str) -> str | None:
        """Like `read`, decoded as UTF-8 (undecodable bytes replaced)."""
        data = self.read(pid, name)
        return None if data is None else data.decode("utf-8", "replace")

    def chunks(self, pid: int | str, name: str, size: int = 1 << 20) -> Chunks | None:
        """The file in pieces of `size` bytes, opened now (so a denial shows as None here);
        a read that fails later (the process exited) just ends the iteration."""
        try:
            handle = self.open(pid, name)
        except OSError as exc:
            self._failed(name, exc)
            return None

        def pieces() -> Chunks:
            with handle:
                while True:
                    try:
                        piece = handle.read(size)
                    except OSError as exc:
                        self._failed(name, exc)
                        return
                    if not piece:
                        return
                    yield piece

        return pieces()


@dataclass(frozen=True, slots=True)
class PidNamespaceView:
    """Whether the PIDs under a proc root are host PIDs, and why gpulens thinks so.

    `sees_host_pids` False means attribution is switched off (every identify() is {}): the PIDs
    NVML reports are host PIDs and would name the wrong processes here. `reason` is the
    sentence a doctor command can print; `self_nspid` is gpulens's own NSpid chain and
    `self_container` the container id in its own cgroup (None when not in a container).
    """

    sees_host_pids: bool
    reason: str
    self_nspid: tuple[int, ...] = ()
    self_container: str | None = None


def inspect_pid_namespace(fs: ProcFS) -> PidNamespaceView:
    """Decide whether `fs.root` shows the host (initial) PID namespace.

    The initial namespace is the only one where PID 2 is `kthreadd` with parent 0 (kernel
    threads are not visible from a container's PID namespace). NSpid alone cannot tell: a
    container's own /proc shows a one-element NSpid like the host's does.
    """
    own = fs.read_text("self", "status")
    nspid = parse_status(own).nspid if own is not None else ()
    cgroup = fs.read_text("self", "cgroup")
    container = parse_cgroup(cgroup).container_id if cgroup is not None else None
    status2 = fs.read_text(2, "status")
    kthreadd = (
        status2 is not None and (s := parse_status(status2)).name == "kthreadd" and (s.ppid == 0)
    )
    if kthreadd:
        where = " from inside a container" if container or len(nspid) > 1 else ""
        return PidNamespaceView(
            True, f"{fs.root} shows the host PID namespace{where}", nspid, container
        )
    if status2 is None and fs.read(1, "status") is None:
        return PidNamespaceView(
            False,
            f"{fs.root} hides PIDs 1 and 2 (procfs mounted with hidepid, or no permission), so "
            "gpulens cannot tell whether it sees host PIDs: run it as root or remount /proc "
            "without hidepid",
            nspid,
            container,
        )
    return PidNamespaceView(
        False,
        f"{fs.root} shows a container's PID namespace (PID 2 is not kthreadd), so the host PIDs "
        "NVML reports cannot be attributed: run gpulens with the host PID namespace "
        "(Kubernetes `hostPID: true`, Docker `--pid=host`) or mount the host's /proc and set "
        "proc_root to it",
        nspid,
        container,
    )
