"""The configured trace directories (`agent.trace_dirs`): what they hold, and a name inside one
resolved to its files, for the dashboard.

Names are relative to one of `trace_dirs`; a name is resolved (symlinks followed) and must
stay inside its directory, so neither `..` nor a symlink pointing elsewhere reaches a file
outside. Entries carry these relative names, never the server's own paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpulens.app.traces import TRACE_SUFFIXES

MAX_LISTED = 500
MAX_DEPTH = 4


class TracePathError(ValueError):
    """A trace name that is not a trace file or directory inside the configured directories;
    `status` is the HTTP status that says why."""

    status = 422


class TraceNotFound(TracePathError):
    status = 404


class TraceOutside(TracePathError):
    status = 403


class TraceTooLarge(TracePathError):
    status = 413


@dataclass
class TraceEntry:
    """A trace the page can open: a file, or a directory of one job's rank files."""

    dir: int
    name: str
    kind: str  # "file" or "job"
    size_bytes: int
    files: int = 1


def _is_trace(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def _inside(path: Path, base: Path) -> bool:
    try:
        return path.resolve(strict=True).is_relative_to(base)
    except (OSError, RuntimeError):
        return False


def list_traces(dirs: Sequence[Path], limit: int = MAX_LISTED) -> list[TraceEntry]:
    """Trace files (and directories holding several, as one job each) under `dirs`, walked
    `MAX_DEPTH` levels deep; entries whose real path leaves their directory are skipped."""
    out: list[TraceEntry] = []
    for i, raw in enumerate(dirs):
        try:
            base = Path(raw).resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if not base.is_dir():
            continue
        stack: list[tuple[Path, int]] = [(base, 0)]
        while stack and len(out) < limit:
            folder, depth = stack.pop()
            try:
                children = sorted(folder.iterdir())
            except OSError:
                continue
            files = [c for c in children if c.is_file() and _is_trace(c) and _inside(c, base)]
            rel = folder.relative_to(base).as_posix()
            if len(files) > 1 and folder != base:
                size = sum(f.stat().st_size for f in files)
                out.append(TraceEntry(i, rel, "job", size, len(files)))
            for f in files:
                out.append(TraceEntry(i, f.relative_to(base).as_posix(), "file", f.stat().st_size))
            if depth < MAX_DEPTH:
                subdirs = [c for c in children if c.is_dir() and not c.is_symlink()]
                stack.extend((d, depth + 1) for d in reversed(subdirs))
    return out[:limit]


def resolve_trace(dirs: Sequence[Path], dir_index: int, name: str, max_bytes: int) -> list[Path]:
    """The files of trace `name` in `dirs[dir_index]`: the file itself, or the rank files of a
    directory. TracePathError for anything outside the directory, missing, not a trace, or
    larger than `max_bytes` in all."""
    if not 0 <= dir_index < len(dirs):
        raise TraceNotFound(
            f"trace directory {dir_index} does not exist: {len(dirs)} directories are configured"
        )
    rel = PurePosixPath(name)
    if not name or "\x00" in name or "\\" in name or rel.is_absolute() or ".." in rel.parts:
        raise TracePathError(
            f"trace name {name!r} is not a relative path inside the trace directory"
        )
    try:
        base = Path(dirs[dir_index]).resolve(strict=True)
        target = (base / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise TraceNotFound(
            f"trace {name!r} does not exist in trace directory {dir_index}"
        ) from None
    if not target.is_relative_to(base):
        raise TraceOutside(f"trace {name!r} leads outside its trace directory: refused")
    if target.is_dir():
        files = sorted(f for f in target.iterdir() if f.is_file() and _is_trace(f))
        files = [f.resolve() for f in files if _inside(f, base)]
        if not files:
            raise TracePathError(f"{name!r} holds no trace files (*.json, *.json.gz)")
    elif target.is_file() and _is_trace(target):
        files = [target]
    else:
        raise TracePathError(f"{name!r} is not a trace file (*.json, *.json.gz)")
    size = sum(f.stat().st_size for f in files)
    if size > max_bytes:
        raise TraceTooLarge(f"{name!r} is {size:,} bytes; the limit is {max_bytes:,} bytes")
    return files


def file_stamps(files: Sequence[Path]) -> tuple[tuple[Any, ...], ...]:
    """Each file's path, size and modification time: a cache key that changes with the files."""
    stats = [(f, f.stat()) for f in files]
    return tuple((str(f), s.st_size, s.st_mtime_ns) for f, s in stats)
