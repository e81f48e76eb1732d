"""Advisory file locks that die with their process (`flock`), shared by compaction and commits."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def take_lock(lock: Path, *, create: bool) -> int | None:
    """A descriptor holding the exclusive `flock` of `lock`, or None: another process holds it,
    or the file is not at `lock` any more (deleted, or replaced, by `remove_stale_locks` between
    our open and our flock: the lock now is the file at the path, if any)."""
    try:
        fd = os.open(lock, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        return None
    taken = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, now = os.fstat(fd), lock.stat()
        taken = (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
    except (BlockingIOError, FileNotFoundError):
        pass
    finally:
        if not taken:
            os.close(fd)
    return fd if taken else None
