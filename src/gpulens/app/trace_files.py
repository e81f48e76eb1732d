"""Profiler trace files: open one (a path or an fsspec URL), bound it by the `limits.*`
settings, hand the stream to the parser, and find the trace files of a directory.

The parser (`gpulens.analyze.traces.load.load_trace`) reads bytes or a binary stream and opens
nothing; this module is the file side, shared by the job analysis (app/traces.py) and the
per-rank tasks of the executors (app/trace_rank.py). pathlib is not imported (a few ms of every
`gpulens trace` start-up).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

from gpulens.analyze.traces.limits import DEFAULT_LIMITS, TraceLimits
from gpulens.analyze.traces.load import DEFAULT_CHUNK_BYTES, load_trace
from gpulens.analyze.traces.model import Trace
from gpulens.errors import TraceFormatError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpulens.config import Config

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
PathLike = str | os.PathLike[str]

_LIMITS_ENV = "GPULENS_LIMITS_"  # the environment variables of the `limits.*` settings


def open_trace(path: PathLike) -> BinaryIO:
    """`path` opened for reading (binary); TraceFormatError naming it when it cannot be.
    A URL (`s3://…`) is opened through fsspec (app/trace_urls.py)."""
    if isinstance(path, str) and "://" in path:
        from gpulens.app.trace_urls import is_url, open_url

        if is_url(path):
            return open_url(path)
    try:
        return open(path, "rb")  # noqa: PTH123 - no pathlib (see the module docstring)
    except OSError as exc:
        raise TraceFormatError(
            f"{os.fspath(path)}: cannot read the trace file ({exc.strerror})"
        ) from exc


def trace_limits(env: Mapping[str, str] | None = None, cfg: Config | None = None) -> TraceLimits:
    """The `limits.*` settings that bound one trace: `cfg`'s, else from the environment
    (`GPULENS_LIMITS_*`, default: os.environ) over their defaults. ConfigError names a bad
    value."""
    if cfg is None:
        environ = os.environ if env is None else env
        if not any(name.startswith(_LIMITS_ENV) for name in environ):
            return DEFAULT_LIMITS  # the settings' defaults (tested equal): no settings to read
        from gpulens.config import load_config  # only here: `gpulens trace` starts without it

        cfg = load_config(env=env)
    return TraceLimits(
        max_inflated_bytes=cfg.get("limits.max_inflated_bytes"),
        max_events=cfg.get("limits.max_events"),
        max_string_bytes=cfg.get("limits.max_string_bytes"),
        max_nesting=cfg.get("limits.max_nesting"),
    )


def load_trace_file(
    path: PathLike,
    rank: int | None = None,
    *,
    name: str | None = None,
    chunk_bytes: int | None = DEFAULT_CHUNK_BYTES,
    limits: TraceLimits | None = None,
) -> Trace:
    """Load the trace file at `path` (JSON or gzip): `load_trace` over the open file.

    `name`: what errors and `Trace.source` call it (default: the path as given). `rank` and
    `chunk_bytes` as `load_trace`; `limits` default to `trace_limits()`. Raises
    TraceFormatError, or InputTooLarge past a limit.
    """
    bounds = trace_limits() if limits is None else limits
    with open_trace(path) as f:
        return load_trace(
            f,
            rank,
            name=os.fspath(path) if name is None else name,
            chunk_bytes=chunk_bytes,
            limits=bounds,
        )


def trace_files(paths: Sequence[PathLike]) -> list[str]:
    """Files named, and the trace files (`*.json`, `*.json.gz`, `*.gz`) inside directories."""
    out: list[str] = []
    for raw in paths:
        p = os.fspath(raw)
        if "://" in p:
            from gpulens.app.trace_urls import is_url, list_url

            listed = list_url(p, TRACE_SUFFIXES) if is_url(p) else None
            if listed == []:
                raise TraceFormatError(f"{p}: no trace files (*.json, *.json.gz) in the directory")
            out += [p] if listed is None else listed
        elif os.path.isdir(p):  # noqa: PTH112 - no pathlib (see above)
            with os.scandir(p) as entries:
                found = sorted(
                    os.path.join(p, e.name)  # noqa: PTH118 - no pathlib (see above)
                    for e in entries
                    if e.name.endswith(TRACE_SUFFIXES) and e.is_file()
                )
            if not found:
                raise TraceFormatError(f"{p}: no trace files (*.json, *.json.gz) in the directory")
            out += found
        else:
            out.append(p)
    if not out:
        raise TraceFormatError("no trace file given")
    return out
