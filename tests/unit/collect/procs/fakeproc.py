"""Builds fake /proc trees under tmp_path: the files attribution reads, in their real formats."""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from gpulens.collect.procs.procfs import ProcFS

DOCKER_ID = "4f9a2b1c" * 8
CRI_ID = "a1b2c3d4e5f6" + "0" * 52
POD_UID = "6f2c1a3e-1b2c-4d5e-8f90-123456789abc"


def stat_line(pid: int, comm: str, start: int, ppid: int = 1) -> str:
    """A /proc/<pid>/stat line; field 22 (starttime) is `start`."""
    fields = ["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    return f"{pid} ({comm}) {' '.join(fields)}\n"


def status_text(name: str, uid: int, ppid: int, nspid: Sequence[int]) -> str:
    return (
        f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{nspid[0]}\n"
        f"Ngid:\t0\nPid:\t{nspid[0]}\nPPid:\t{ppid}\nTracerPid:\t0\n"
        f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        f"NStgid:\t{chr(9).join(map(str, nspid))}\nNSpid:\t{chr(9).join(map(str, nspid))}\n"
        "VmRSS:\t  123456 kB\nThreads:\t12\n"
    )


def maps_text(libs: Iterable[str], filler: int = 40) -> str:
    """Mapping lines like a real process: anonymous regions, then each library five times."""
    lines = []
    addr = 0x7F0000000000
    for i in range(filler):
        lines.append(f"{addr + i * 4096:x}-{addr + (i + 1) * 4096:x} rw-p 00000000 00:00 0 ")
    for n, lib in enumerate(libs):
        for perm in ("r--p", "r-xp", "r--p", "rw-p", "---p"):
            a = addr + (filler + n * 5) * 4096
            lines.append(f"{a:x}-{a + 4096:x} {perm} 00000000 08:01 {1000 + n}    {lib}")
    return "\n".join(lines) + "\n"


class FakeProc:
    """A proc root. `host_ns=False` builds a container's view (no kthreadd at PID 2)."""

    def __init__(
        self, root: Path, *, host_ns: bool = True, self_cgroup: str = "0::/user.slice"
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        if host_ns:
            self.add(1, name="systemd", cmdline=["/sbin/init"], cgroup="0::/init.scope", ppid=0)
            self.add(2, name="kthreadd", cmdline=[], cgroup="0::/", ppid=0, uid=0)
        else:
            self.add(1, name="python3", cmdline=["python3", "agent.py"], cgroup="0::/", ppid=0)
        self.add("self", name="gpulens", cmdline=["gpulens", "agent"], cgroup=self_cgroup)

    def add(
        self,
        pid: int | str,
        *,
        name: str = "python3",
        cmdline: Sequence[str] = ("/usr/bin/python3", "train.py"),
        uid: int = 1000,
        start: int = 5000,
        ppid: int = 1,
        cgroup: str = "0::/user.slice/user-1000.slice/session-3.scope",
        environ: Mapping[str, str] | None = None,
        maps: Iterable[str] | None = (),
        nspid: Sequence[int] | None = None,
    ) -> Path:
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        number = int(pid) if str(pid).isdigit() else 4242
        (d / "stat").write_text(stat_line(number, name, start, ppid))
        (d / "status").write_text(status_text(name, uid, ppid, nspid or [number]))
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in cmdline))
        (d / "cgroup").write_text(cgroup if cgroup.endswith("\n") else cgroup + "\n")
        env = {"PATH": "/usr/bin", "HOME": "/home/u", **(environ or {})}
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
        if maps is not None:
            (d / "maps").write_text(maps_text(maps))
        return d

    def restart(self, pid: int, start: int, **kw: object) -> None:
        """The same PID number now belongs to a new process started at `start`."""
        self.add(pid, start=start, **kw)  # type: ignore[arg-type]

    def remove(self, pid: int) -> None:
        for f in (self.root / str(pid)).iterdir():
            f.unlink()
        (self.root / str(pid)).rmdir()


class DenyingProcFS(ProcFS):
    """A ProcFS where some file names raise EACCES, as for another user's process without root."""

    def __init__(self, root: Path, deny: Iterable[str]) -> None:
        super().__init__(root)
        self.deny = frozenset(deny)

    def open(self, pid: int | str, name: str) -> BinaryIO:
        if name in self.deny and str(pid) not in ("self", "1", "2"):
            raise PermissionError(errno.EACCES, "Permission denied", str(self.root / str(pid)))
        return super().open(pid, name)
