"""The input of the trace loader: bytes or a binary stream, read block by block and inflated
when it is gzip (sniffed from the magic bytes; several members are read in turn).

Nothing here opens a file: the caller hands over what it opened (gpulens.app.traces opens
paths). `Reader` can start again from where loading began when the input allows it (bytes, a
seekable stream), which the loader uses for the precise error on a document it cannot stream.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Protocol, cast

from gpulens.analyze.traces.limits import too_large
from gpulens.errors import TraceFormatError

__all__ = ["Readable", "Reader", "TraceSource", "blocks", "not_empty", "read_all"]

READ_BYTES = 1 << 18  # compressed bytes read at a time
GZIP_MAGIC = b"\x1f\x8b"


class Readable(Protocol):
    """A binary stream as the loader uses it: `read(n)` gives at most `n` bytes, b"" at the end.

    An open file, a pipe, `gzip.GzipFile`, a request body wrapped as a stream. Where it also has
    `seekable()` (true) and `seek` / `tell`, a document that cannot be streamed is read again from
    where loading began, for the precise error.
    """

    def read(self, size: int, /) -> bytes: ...


TraceSource = bytes | bytearray | memoryview | Readable

_inflate: Any = zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
try:  # ISA-L's inflate: the same API as zlib's, 2.5× faster
    from isal import isal_zlib

    _inflate = isal_zlib
    _INFLATE_ERRORS += (cast(type[Exception], isal_zlib.error),)  # its stub types it oddly
except ImportError:  # pragma: no cover - a platform without python-isal wheels
    pass


class Reader:
    """The input, read block by block: bytes, or a stream; `again()` restarts it where it can."""

    def __init__(self, source: TraceSource, name: str) -> None:
        if isinstance(source, str) or hasattr(source, "__fspath__"):
            raise TypeError(
                f"load_trace reads bytes or a binary stream, not the path {source!r}: open the "
                "file first (gpulens.app.traces.load_trace_file does)"
            )
        self.name = name
        self.data: memoryview | None = None
        self.stream: Readable | None = None
        self.pos = 0
        self.start: int | None = None  # where a seekable stream began
        if isinstance(source, bytes | bytearray | memoryview):
            self.data = memoryview(source).cast("B")
        elif callable(getattr(source, "read", None)):
            self.stream = source
            try:
                if source.seekable():  # type: ignore[attr-defined]
                    self.start = source.tell()  # type: ignore[attr-defined]
            except (AttributeError, OSError, ValueError):
                self.start = None
        else:
            raise TypeError(
                f"load_trace reads bytes or a binary stream (with .read(n)), "
                f"not {type(source).__name__}"
            )

    def read(self, n: int) -> bytes:
        """At most `n` bytes (fewer only when the stream gives fewer); b"" at the end."""
        if self.data is not None:
            view = self.data[self.pos : self.pos + n]
            self.pos += len(view)
            return bytes(view)
        assert self.stream is not None
        try:
            block = self.stream.read(n)
        except OSError as exc:
            raise TraceFormatError(f"{self.name}: cannot read the trace ({exc})") from exc
        return bytes(block) if block else b""

    def read_at_least(self, data: bytes, n: int) -> bytes:
        """`data` extended by reads until it holds `n` bytes or the input ends."""
        while len(data) < n and (more := self.read(max(n - len(data), READ_BYTES))):
            data += more
        return data

    def all_bytes(self) -> bytes | None:
        """The whole input when it was handed as plain bytes (no copy), else None."""
        if self.data is not None and self.pos == 0 and self.data[:2] != GZIP_MAGIC:
            obj = self.data.obj
            return obj if isinstance(obj, bytes) and len(obj) == len(self.data) else None
        return None

    def again(self) -> bool:
        """Back to where loading began: True for bytes and a seekable stream, else False."""
        if self.data is not None:
            self.pos = 0
            return True
        if self.start is None:
            return False
        try:
            self.stream.seek(self.start)  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return False
        return True


def blocks(reader: Reader, block_bytes: int, max_bytes: int | None = None) -> Iterator[bytes]:
    """The input's (decompressed) bytes, in blocks of at most about `block_bytes`.

    InputTooLarge (`limits.max_inflated_bytes`) once more than `max_bytes` came out, before
    they are held anywhere: a gzip bomb is stopped after one block past the limit.
    """
    head = reader.read_at_least(b"", 2)
    gzipped = head[:2] == GZIP_MAGIC
    out = (_gunzip if gzipped else _plain)(reader, head, block_bytes)
    if max_bytes is None:
        yield from out
        return
    total = 0
    for block in out:
        total += len(block)
        if total > max_bytes:
            what = "the trace, decompressed," if gzipped else "the trace"
            raise too_large(reader.name, what, max_bytes, "limits.max_inflated_bytes")
        yield block


def _plain(reader: Reader, head: bytes, block_bytes: int) -> Iterator[bytes]:
    if head:
        yield head
    while block := reader.read(block_bytes):
        yield block


def _gunzip(reader: Reader, head: bytes, block_bytes: int) -> Iterator[bytes]:
    name = reader.name
    member = _inflate.decompressobj(31)
    data = head
    while True:
        try:
            out = member.decompress(data, block_bytes)
        except _INFLATE_ERRORS as exc:
            raise TraceFormatError(f"{name}: corrupt gzip file ({exc})") from exc
        data = member.unconsumed_tail
        if out:
            yield out
        if member.eof:  # next member, if any (trailing padding ignored)
            data = reader.read_at_least(member.unused_data, 2)
            if not data.startswith(GZIP_MAGIC):
                return
            member = _inflate.decompressobj(31)
        elif not data and len(out) < block_bytes:  # all input used and no output pending
            data = reader.read(READ_BYTES)
            if not data:
                raise TraceFormatError(
                    f"{name}: truncated gzip file (the compressed stream ends early); "
                    "copy the trace again"
                )


def read_all(reader: Reader, max_bytes: int | None = None) -> bytes:
    """The whole (decompressed) input; InputTooLarge past `max_bytes`."""
    data = reader.all_bytes()
    if data is not None and max_bytes is not None and len(data) > max_bytes:
        raise too_large(reader.name, "the trace", max_bytes, "limits.max_inflated_bytes")
    if data is None:
        data = b"".join(blocks(reader, 1 << 24, max_bytes))
    return not_empty(data, reader.name)


def not_empty(data: bytes, name: str) -> bytes:
    if not data.strip():
        raise TraceFormatError(f"{name}: empty file, expected a PyTorch profiler JSON trace")
    return data
