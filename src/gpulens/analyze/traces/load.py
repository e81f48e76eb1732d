"""The one Kineto (PyTorch profiler) trace parser: bytes or a binary stream in, a columnar `Trace`
out.

It opens nothing: the caller hands it the trace's bytes, or a stream it reads `n` bytes at a time
(anything with `.read(n)`: an open file, a pipe, an upload), and a display name for the errors and
the rank (`gpulens.app.traces.load_trace_file` opens a path and hands the stream over). Every other
module under `analyze/traces/` takes a `Trace`.

How it reads (see docs/traces.md):

* `.json` or gzip (source.py sniffs the magic bytes, so any name works; several gzip members
  are read in turn); a JSON object with `traceEvents` or a legacy bare JSON array.
* Streaming, bounded memory: the stream is read and decompressed in blocks; the `traceEvents`
  array is cut at event boundaries (`}, {` at the array's top level — a cut is kept only if the
  slice parses) into slices of about `chunk_bytes`. Each slice is read by the C scanner
  (`_scan.c`, where it is built) straight into columns; a slice it leaves to Python (a value of an
  unusual type, text that is not strict JSON, ...) is decoded by msgspec into structs holding only
  the fields the analyses read (schema.py: the other fields are skipped without making Python
  objects), turned into numpy columns (columns.py) and dropped before the next. A slice whose
  values fit no struct (an element or `args` that is not an object), or that msgspec rejects, is
  parsed with orjson into dicts, with the same meaning. Only the text before and after the array
  is kept, for the metadata. Peak ≈ the columns (≈ 90 B per event) + one parsed slice, whatever
  the input size. The cyclic garbage collector is paused while loading (parsed JSON has no
  cycles; its passes over millions of fresh objects would double the time).
* Exact times: see times.py.
* Input that cannot be cut (not JSON, no `traceEvents`, …) is parsed whole with orjson, which
  gives the precise format error: from the text still held when nothing was dropped yet, else
  read again from the start (bytes, or a seekable stream). A stream that cannot seek, and whose
  text already went by, gets the streaming parser's reason instead. `chunk_bytes=None` parses
  whole on purpose. One difference from orjson: neither the scanner nor msgspec checks the UTF-8
  of the fields it skips, so a slice with invalid UTF-8 in an unread field still loads.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import msgspec

from gpulens.analyze.traces.columns import ColumnBuilder, Scanned, as_int
from gpulens.analyze.traces.model import Trace, base_name
from gpulens.analyze.traces.schema import DECODERS
from gpulens.analyze.traces.source import Readable, Reader, TraceSource, blocks, not_empty, read_all
from gpulens.analyze.traces.times import decimal_to_ns, rewrite_times
from gpulens.errors import TraceFormatError

# orjson (the whole-document parse, the fallback for slices msgspec rejects) is not imported for
# the common path: it costs a few ms of every `gpulens trace` start-up.

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "SCANNER",
    "Readable",
    "TraceSource",
    "decimal_to_ns",
    "load_trace",
    "rank_from_name",
]


_scan_slice: Callable[[Any, int, int], tuple[Any, ...] | None] | None = None
try:  # the C scanner (setup.py); a build without a compiler decodes every slice in Python
    from gpulens.analyze.traces import _scan

    _scan_slice = _scan.scan
except ImportError:  # pragma: no cover - an install without the compiled scanner
    pass
SCANNER = _scan_slice is not None  # whether the C scanner is built

DEFAULT_CHUNK_BYTES = 1 << 19
_USE_STRUCTS = True  # stream slices through msgspec structs (False: orjson dicts, for tests)
_USE_SCANNER = True  # and through the C scanner first, where it is built (False: for tests)
_WHITESPACE = b" \t\r\n"

# `}` closing an element of the array, then `, {` (next element) or `]` (the array's end)
_BOUNDARY = re.compile(rb"\}\s*(?:,\s*\{|\])")
_END = re.compile(rb"\}\s*\]")
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_RANK_PATTERNS = (
    re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[_\-.])r(\d+)(?=$|[_\-.]|of)", re.IGNORECASE),
)


class _NotStreamable(Exception):
    """The text cannot be cut into event slices; parse the whole file instead."""


# -- streaming parse -------------------------------------------------------------------------


class _Text:
    """A sliding window over the decompressed text (a bytearray: slices parse in place).

    Nothing is dropped until the first slice of events has been cut (`pinned`): up to then the
    window holds the text from the start anyway (the text before the array is kept for the
    metadata, and an uncut slice is kept whole), and a document that cannot be cut is parsed
    whole from it, even from a stream that cannot be read again.
    """

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.buf = bytearray()
        self.eof = False
        self.pinned = True  # drop nothing yet
        self.whole = True  # `buf` + the blocks not yet read are the whole text

    def more(self, keep_from: int) -> int:
        """Drop the text before `keep_from` (unless pinned), append a block; returns the shift
        applied."""
        block = next(self.blocks, None)
        if block is None:
            self.eof = True
        if self.pinned:
            keep_from = 0
        elif keep_from:
            self.whole = False
            del self.buf[:keep_from]
        if block:
            self.buf += block
        return keep_from

    def skip_ws(self, pos: int) -> int:
        while True:
            n = len(self.buf)
            while pos < n and self.buf[pos] in _WHITESPACE:
                pos += 1
            if pos < n or self.eof:
                return pos
            pos -= self.more(max(0, pos - 1))  # keep one byte before `pos` (see _parse_slice)

    def rest(self, pos: int) -> bytes:
        """The text from `pos` to the end (read now; kept in the window while pinned)."""
        if self.pinned:
            self.buf += b"".join(self.blocks)
            return bytes(self.buf[pos:])
        self.whole = False
        return bytes(self.buf[pos:]) + b"".join(self.blocks)

    def everything(self) -> bytes:
        """The whole text (only while `whole`): what is held and the blocks not yet read."""
        return bytes(self.buf) + b"".join(self.blocks)


class _SliceDecoder:
    """Decodes slices with the fastest schema that fits (schema.py), msgspec first.

    A slice that a schema rejects is tried with the next; once a later schema (not the last,
    most permissive one) has fitted, the earlier ones are not tried again for that trace, so a
    trace with float times or a category newer than the known ones costs one wasted attempt, not
    one per slice.
    """

    def __init__(self, use_structs: bool = True, use_scanner: bool = True) -> None:
        self.first = 0 if use_structs else len(DECODERS)
        self.scan = _scan_slice if use_structs and use_scanner else None

    def decode(self, piece: memoryview) -> list[Any] | Scanned | None:
        """The slice's events: the C scanner's columns, else structs, else orjson dicts; None if
        the text is not JSON. `piece` is the slice with its brackets."""
        if self.scan is not None:
            scanned = self.scan(piece, 1, len(piece) - 1)
            if scanned is not None:
                return scanned
        for i in range(self.first, len(DECODERS)):
            try:
                events: list[Any] = DECODERS[i].decode(piece)
            except msgspec.ValidationError:  # a value of another type: the next schema
                continue
            except msgspec.DecodeError:  # not JSON: orjson decides (and says where)
                break
            if i < len(DECODERS) - 1:
                self.first = i
            return events
        import orjson

        try:
            return cast(list[Any], orjson.loads(piece))
        except orjson.JSONDecodeError:
            return None


def _parse_slice(
    buf: bytearray, start: int, end: int, decoder: _SliceDecoder
) -> list[Any] | Scanned | None:
    """`buf[start:end]` (elements of the array) parsed as a list, without copying the text.

    None if the text is not a JSON array. The bytes just before and after the slice (already
    consumed, or the separator) are turned into `[` and `]` for the parse, then put back.
    """
    before, after = buf[start - 1], buf[end]
    buf[start - 1], buf[end] = 0x5B, 0x5D  # "[", "]"
    try:
        with memoryview(buf) as view, view[start - 1 : end + 1] as piece:
            parsed = decoder.decode(piece)
    finally:
        buf[start - 1], buf[end] = before, after
    return parsed if isinstance(parsed, list | tuple) else None


def _cut(
    text: _Text, pos: int, chunk_bytes: int, decoder: _SliceDecoder
) -> tuple[list[Any] | Scanned, int, int] | None:
    """The first slice from `pos` that ends at an element boundary and parses, if any.

    Slices end at least `chunk_bytes` after `pos`; at the end of the file, at the array's end.
    Returns (events, end of the slice, position just after the boundary match).
    """
    buf = text.buf
    searches = []
    if len(buf) - pos > chunk_bytes:
        searches.append(_BOUNDARY.finditer(buf, pos + chunk_bytes))
    if text.eof:
        searches.append(_END.finditer(buf, pos))
    for matches in searches:
        for m in matches:
            events = _parse_slice(buf, pos, m.start() + 1, decoder)
            if events is not None:
                return events, m.start() + 1, m.end()
    return None


def _stream_events(text: _Text, pos: int, builder: ColumnBuilder, chunk_bytes: int) -> int:
    """Feed the array whose first element is at `pos` (> 0); returns the position after `]`."""
    decoder = _SliceDecoder(_USE_STRUCTS, _USE_SCANNER)
    pos = text.skip_ws(pos)
    if text.buf[pos : pos + 1] == b"]":
        return pos + 1
    while True:
        cut = _cut(text, pos, chunk_bytes, decoder)
        if cut is None:
            if text.eof:
                raise _NotStreamable("the events array does not end")
            pos -= text.more(pos - 1)  # keep the byte before `pos` for the parse's "["
            continue
        events, end, after = cut
        with memoryview(text.buf) as view, view[pos:end] as piece:
            builder.add(events, piece)
        del events
        text.pinned = False
        if text.buf[after - 1] == 0x5D:  # "]"
            return after
        pos = after - 1


def _parse_stream(
    text: _Text, builder: ColumnBuilder, chunk_bytes: int, name: str
) -> dict[str, Any] | None:
    """Metadata (None for a bare array) after streaming every event into `builder`."""
    first = text.skip_ws(0)
    if first >= len(text.buf):
        raise TraceFormatError(f"{name}: empty file, expected a PyTorch profiler JSON trace")
    if text.buf[first : first + 1] == b"[":
        end = _stream_events(text, first + 1, builder, chunk_bytes)
        if text.rest(end).strip():
            raise _NotStreamable("text after the events array")
        return None
    if text.buf[first : first + 1] != b"{":
        raise _NotStreamable("not a JSON object")
    while (m := _TRACE_EVENTS.search(text.buf)) is None:
        if text.eof:
            raise _NotStreamable("no traceEvents array found")
        text.more(0)
    head = bytes(text.buf[: m.start()])
    end = _stream_events(text, m.end(), builder, chunk_bytes)
    try:
        doc = msgspec.json.decode(head + b'"traceEvents": []' + text.rest(end))
    except msgspec.DecodeError as exc:
        raise _NotStreamable("metadata is not valid JSON") from exc
    if not isinstance(doc, dict):
        raise _NotStreamable("root is not an object")
    doc.pop("traceEvents", None)
    return doc


# -- whole-document parse --------------------------------------------------------------------


def _exact_events(raw: bytes) -> list[Any]:
    import orjson

    doc = orjson.loads(rewrite_times(raw))
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else []


def _parse_whole(raw: bytes, builder: ColumnBuilder, name: str) -> dict[str, Any] | None:
    """Parse the whole document at once; the source of precise format errors."""
    import orjson

    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"{name}: not valid JSON ({exc})") from exc
    if isinstance(doc, list):
        builder.add(doc, raw, lambda: _exact_events(raw))
        return None
    if not isinstance(doc, dict):
        raise TraceFormatError(
            f"{name}: the JSON root is a {type(doc).__name__}; expected an object with "
            "`traceEvents` (or a bare array of events)"
        )
    events = doc.pop("traceEvents", None)
    if events is None:
        keys = ", ".join(sorted(doc)[:8]) or "none"
        raise TraceFormatError(
            f"{name}: no `traceEvents` in the JSON object (keys: {keys}); "
            "is this a PyTorch profiler trace?"
        )
    if not isinstance(events, list):
        raise TraceFormatError(f"{name}: `traceEvents` is a {type(events).__name__}, not a list")
    builder.add(events, raw, lambda: _exact_events(raw))
    return doc


# -- rank and entry point --------------------------------------------------------------------


def rank_from_name(name: str) -> int | None:
    """Rank in a file name (the last `/` part of `name`): `rank_3`, `rank-3`, `rank3`,
    `trainer_r3`, `r3of8` → 3."""
    base = base_name(name)
    for pattern in _RANK_PATTERNS:
        m = pattern.search(base)
        if m:
            return int(m.group(1))
    return None


def _rank(metadata: dict[str, Any] | None, name: str, rank: int | None) -> tuple[int | None, str]:
    info = metadata.get("distributedInfo") if metadata else None
    if isinstance(info, dict):
        value = as_int(info.get("rank"))
        if value >= 0:
            return value, "distributedInfo"
    by_name = rank_from_name(name)
    if by_name is not None:
        return by_name, "file name"
    if rank is not None:
        return rank, "argument"
    return None, "unknown"


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _streamed(reader: Reader, chunk_bytes: int) -> tuple[ColumnBuilder, dict[str, Any] | None]:
    """The streaming parse; a document it cannot cut is parsed whole (into a fresh builder)."""
    text = _Text(blocks(reader, max(chunk_bytes, 1 << 16)))
    builder = ColumnBuilder(reader.name)
    try:
        return builder, _parse_stream(text, builder, chunk_bytes, reader.name)
    except _NotStreamable as exc:
        if text.whole:
            raw = not_empty(text.everything(), reader.name)
        elif reader.again():
            raw = read_all(reader)
        else:
            raise TraceFormatError(
                f"{reader.name}: not valid JSON, or not a trace ({exc}); this stream cannot be "
                "read again to say exactly where: load the file, or its bytes, for that"
            ) from None
    builder = ColumnBuilder(reader.name)
    return builder, _parse_whole(raw, builder, reader.name)


def load_trace(
    source: TraceSource,
    rank: int | None = None,
    *,
    name: str,
    chunk_bytes: int | None = DEFAULT_CHUNK_BYTES,
) -> Trace:
    """Parse one Kineto trace (JSON or gzip, object or bare array) as a `Trace`.

    `source`: the trace's bytes, or a binary stream (`read(n)`), read from where it stands;
    the caller opens and closes it. `name`: what errors and `Trace.source` call it (a path, an
    upload's name); its last `/` part is searched for a rank. Rank: `distributedInfo.rank`, else
    the name (`rank_3`, `_r3`, `rank3`), else `rank`. `chunk_bytes`: size of the slices streamed
    through the parser; None parses the whole document at once (same result, memory ≈ 10× the
    JSON). Raises `TraceFormatError` naming the trace and the problem.
    """
    reader = Reader(source, name)
    with _gc_paused():
        metadata: dict[str, Any] | None
        if chunk_bytes is None:
            builder = ColumnBuilder(name)
            metadata = _parse_whole(read_all(reader), builder, name)
        else:
            builder, metadata = _streamed(reader, max(1, chunk_bytes))
        events, flows = builder.tables()
    meta = metadata or {}
    resolved, rank_source = _rank(meta, name, rank)
    return Trace(
        source=name,
        rank=resolved,
        rank_source=rank_source,
        events=events,
        flows=flows,
        names=list(builder.names),
        categories=list(builder.categories),
        metadata=meta,
        process_names=builder.process_names,
        thread_names=builder.thread_names,
        raw_event_count=builder.count,
    )
