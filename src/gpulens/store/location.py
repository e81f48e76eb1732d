"""Where a store lives: a local directory (`pathlib.Path`) or an object-store URL (`ObjectPath`).

`open_location("s3://bucket/prefix")` gives an `ObjectPath`: the small part of the `pathlib`
API the store uses (`/`, `name`, `parent`, `iterdir`, `exists`, `stat`, `unlink`, ...) over a
pyarrow filesystem (S3 and GCS ship in the pyarrow wheel; other schemes go through fsspec when
its implementation is installed). Anything else is a local `Path`, untouched: the local store
pays nothing for this module.

Object stores have no rename and no `flock`; an object appears whole when its upload
completes, or not at all. `ObjectPath.write_bytes` is that one atomic upload; the store's
protocols for object storage (docs/storage.md) build on nothing else.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from gpulens.errors import ConfigError, StoreError

#: object-store URL schemes with a filesystem in the pyarrow wheel
NATIVE_SCHEMES = ("s3", "gs", "gcs")
T = TypeVar("T")
R = TypeVar("R")

#: requests sent at once when many small objects (footers) are read
PARALLEL_REQUESTS = 16
#: seconds a request may go without receiving a byte (the AWS SDK's default, 3 s, gives up on a
#: busy S3-compatible server in the middle of a large scan) and to open a connection
REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
#: the settings (and environment variables) that configure S3 access
S3_KEYS = ("aws_endpoint_url", "aws_access_key_id", "aws_secret_access_key", "aws_region")


@dataclass(frozen=True, slots=True)
class ObjectStat:
    """What `ObjectPath.stat` knows of an object (the fields the store reads)."""

    st_size: int
    st_mtime_ns: int


class ObjectPath:
    """A path in an object store, with the subset of `pathlib.Path` the store uses.

    `key` is `bucket/prefix/...` without the scheme; `str()` gives back the URL. Instances are
    immutable, hashable and ordered by URL.
    """

    __slots__ = ("fs", "key", "scheme")

    def __init__(self, fs: pafs.FileSystem, scheme: str, key: str) -> None:
        self.fs = fs
        self.scheme = scheme
        self.key = key.strip("/")

    # -- pure path operations ----------------------------------------------------------------

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(self.fs, self.scheme, f"{self.key}/{str(name).strip('/')}")

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.fs, self.scheme, self.key.rsplit("/", 1)[0])

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def relative_to(self, other: ObjectPath) -> str:
        prefix = other.key + "/"
        if not self.key.startswith(prefix):
            raise ValueError(f"{self} is not under {other}")
        return self.key[len(prefix) :]

    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.scheme, self.key) == (
            other.scheme,
            other.key,
        )

    def __hash__(self) -> int:
        return hash((self.scheme, self.key))

    def __lt__(self, other: ObjectPath) -> bool:
        return self.key < other.key

    # -- I/O ---------------------------------------------------------------------------------

    def iterdir(self) -> Iterator[ObjectPath]:
        """The objects and common prefixes directly under this one (one LIST request);
        FileNotFoundError when there is none, as for a missing directory."""
        infos = self._list()
        if not infos:
            raise FileNotFoundError(str(self))
        for info in infos:
            yield ObjectPath(self.fs, self.scheme, info.path)

    def entries(self) -> list[tuple[str, bool, ObjectStat]]:
        """(name, is_dir, stat) of what lies directly under this prefix ([] when nothing)."""
        return [
            (info.base_name, info.type == pafs.FileType.Directory, _stat(info))
            for info in self._list()
        ]

    def _list(self) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.key, allow_not_found=True, recursive=False)
        try:
            return list(self.fs.get_file_info(selector))
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot list {str(self)!r}: {exc}") from exc

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """The entries directly under this prefix whose name matches `pattern` (no `/`)."""
        for info in self._list():
            if fnmatch.fnmatchcase(info.base_name, pattern):
                yield ObjectPath(self.fs, self.scheme, info.path)

    def _info(self) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(self.key)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot look up {str(self)!r}: {exc}") from exc

    def exists(self) -> bool:
        return bool(self._info().type != pafs.FileType.NotFound)

    def is_dir(self) -> bool:
        return bool(self._info().type == pafs.FileType.Directory)

    def stat(self) -> ObjectStat:
        info = self._info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(str(self))
        return _stat(info)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: prefixes exist as soon as an object is under them."""

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.key)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError as exc:  # pyarrow reports a missing key as a generic OSError on S3
            if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                if not missing_ok:
                    raise FileNotFoundError(str(self)) from exc
                return
            raise

    def delete_tree(self) -> None:
        """Delete every object under this prefix (batched deletes)."""
        try:
            self.fs.delete_dir(self.key)
        except FileNotFoundError:
            return

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.key) as fh:
                return bytes(fh.read())
        except OSError as exc:
            if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                raise FileNotFoundError(str(self)) from exc
            raise

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes | pa.Buffer) -> int:
        """Upload `data` as this object in one request sequence: the object appears complete
        when the upload completes, or never (a writer killed midway leaves nothing visible)."""
        with self.fs.open_output_stream(self.key) as out:
            out.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`fn` over `items` on up to PARALLEL_REQUESTS threads (object-store latency, not CPU, is
    what they wait on); in order; the first exception is raised."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(min(PARALLEL_REQUESTS, len(items))) as pool:
        return list(pool.map(fn, items))


def _stat(info: pafs.FileInfo) -> ObjectStat:
    mtime = info.mtime_ns if info.mtime_ns is not None else 0
    return ObjectStat(st_size=int(info.size or 0), st_mtime_ns=int(mtime))


#: a store location: a local directory or a prefix in an object store
StorePath = Path | ObjectPath


def is_url(text: str) -> bool:
    """True for `scheme://...` with a scheme of two or more letters (not `C:\\` paths)."""
    scheme = urlsplit(text).scheme
    return len(scheme) > 1 and "://" in text


def open_location(
    where: str | os.PathLike[str] | ObjectPath, options: Mapping[str, str | None] | None = None
) -> StorePath:
    """The store location `where` names: an `ObjectPath` for a URL, else a local `Path`.

    `options` holds `S3_KEYS` from the configuration; the standard AWS variables
    (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) fill what it
    leaves unset. ConfigError names a URL whose scheme has no filesystem here and what to install.
    """
    if isinstance(where, ObjectPath):
        return where
    text = os.fspath(where)
    if not is_url(text):
        return Path(text).expanduser()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    key = f"{parts.netloc}{parts.path}".strip("/")
    if not parts.netloc:
        raise ConfigError(
            f"data_dir {text!r} names no bucket: write it as {scheme}://BUCKET/PREFIX"
        )
    return ObjectPath(filesystem_for(scheme, text, options or {}), scheme, key)


def filesystem_for(scheme: str, url: str, options: Mapping[str, str | None]) -> pafs.FileSystem:
    """A pyarrow filesystem for URLs of `scheme` (ConfigError when none can be made)."""
    if scheme == "s3":
        return s3_filesystem(options)
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem()
    try:
        import fsspec  # type: ignore[import-untyped]
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        return PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme)))
    except ImportError as exc:
        raise ConfigError(
            f"data_dir {url!r}: the {scheme}:// filesystem is not installed ({exc}); install "
            f"its fsspec implementation (az://: 'pip install adlfs', others: see fsspec's list "
            f"of known implementations) or use s3:// or gs://, which pyarrow supports itself"
        ) from exc
    except ValueError as exc:
        raise ConfigError(
            f"data_dir {url!r}: unknown storage scheme {scheme!r} ({exc}); use a local "
            f"directory or s3://, gs:// or az:// (with adlfs installed)"
        ) from exc


def s3_settings(options: Mapping[str, str | None]) -> dict[str, str]:
    """The S3 settings in force: each of `S3_KEYS` from `options`, else its AWS variable."""
    out: dict[str, str] = {}
    for key in S3_KEYS:
        value = options.get(key) or os.environ.get(key.upper())
        if value:
            out[key] = value
    return out


def s3_filesystem(options: Mapping[str, str | None]) -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem for the endpoint and credentials in force (`s3_settings`)."""
    s = s3_settings(options)
    # delayed open: an object smaller than one part goes up as one PUT, not the three requests
    # of a multipart upload (create, part, complete); larger ones stay multipart
    kwargs: dict[str, object] = {
        "allow_delayed_open": True,
        "request_timeout": REQUEST_TIMEOUT_S,
        "connect_timeout": CONNECT_TIMEOUT_S,
    }
    endpoint = s.get("aws_endpoint_url")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        kwargs["scheme"] = parts.scheme or "https"
        kwargs["allow_bucket_creation"] = False
    if "aws_access_key_id" in s:
        kwargs["access_key"] = s["aws_access_key_id"]
        kwargs["secret_key"] = s.get("aws_secret_access_key", "")
    if "aws_region" in s:
        kwargs["region"] = s["aws_region"]
    try:
        return pafs.S3FileSystem(**kwargs)
    except (ValueError, pa.ArrowException) as exc:
        raise ConfigError(f"cannot set up S3 access ({exc}); check the aws_* settings") from exc
