"""Trace files named by URL (`s3://bucket/job/rank_0.json.gz`, `file:///…`): opened and
listed through fsspec, which Dask installs (the `dask` extra); each filesystem needs its own
library (s3fs for `s3://`, gcsfs for `gs://`, adlfs for `az://`).

With `--executor dask://…` the workers open the URLs themselves, so the client only lists
directories (names and sizes) and never reads trace bytes.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, BinaryIO, cast

from gpulens.errors import ConfigError, TraceFormatError

__all__ = ["is_url", "list_url", "open_url"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def is_url(path: str) -> bool:
    """Whether `path` is a URL (`scheme://…`, the scheme at least two letters)."""
    return _SCHEME.match(path) is not None


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        fsspec: Any = importlib.import_module("fsspec")  # untyped: imported as a value
    except ImportError as exc:
        raise ConfigError(
            f"{url}: reading traces from URLs needs fsspec: pip install 'gpulens[dask]' "
            "(and the filesystem's library, e.g. s3fs for s3://)"
        ) from exc
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise ConfigError(
            f"{url}: fsspec cannot open this kind of URL ({exc}); install the filesystem's "
            "library (s3fs for s3://, gcsfs for gs://, adlfs for az://)"
        ) from exc
    return fs, str(root)


def open_url(url: str) -> BinaryIO:
    """The file at `url`, opened for reading (binary); TraceFormatError naming it when it
    cannot be."""
    fs, root = _filesystem(url)
    try:
        return cast(BinaryIO, fs.open(root, "rb"))
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"{url}: cannot read the trace file ({exc})") from exc


def list_url(url: str, suffixes: tuple[str, ...]) -> list[str] | None:
    """The trace files (names ending in `suffixes`) directly inside the directory `url`, as
    URLs, sorted; None when `url` is not a directory."""
    fs, root = _filesystem(url)
    try:
        if not fs.isdir(root):
            return None
        entries = fs.ls(root, detail=True)
    except OSError as exc:
        raise TraceFormatError(f"{url}: cannot list the directory ({exc})") from exc
    names = [str(e["name"]) for e in entries if e.get("type") == "file"]
    return sorted(fs.unstrip_protocol(n) for n in names if n.endswith(suffixes))
