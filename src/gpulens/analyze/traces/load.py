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
* Only a top-level `traceEvents` is read: the root object's members are walked in C
  (`_scan.members`, one linear pass), so one nested in another value is never taken for it.
* Bounded (`TraceLimits`, the `limits.*` settings; docs/traces.md "Limits"): the inflated bytes,
  the events, each string's length and the nesting inside an event; past one, InputTooLarge.
  Text whose root is not an object or an array (NUL bytes, garbage) is refused from its first
  bytes; whitespace is skipped in C and never held.
* Exact times: see times.py.
* Input that cannot be cut (not JSON, …) is parsed whole with orjson when it is at most
  HELD_BYTES, which gives the precise format error: from the text still held when nothing was
  dropped yet, else read again from the start (bytes, or a seekable stream). A larger input, or
  a stream that cannot seek whose text already went by, gets the streaming parser's reason
  instead. `chunk_bytes=None` parses whole on purpose. One difference from orjson: neither the
  scanner nor msgspec checks the UTF-8 of the fields it skips, so a slice with invalid UTF-8 in
  an unread field still loads.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, cast

from gpulens.analyze.traces.columns import ColumnBuilder, Scanned, as_int, struct_decoders
from gpulens.analyze.traces.limits import DEFAULT_LIMITS, TraceLimits, too_large
from gpulens.analyze.traces.model import Trace, base_name
from gpulens.analyze.traces.source import Readable, Reader, TraceSource, blocks, not_empty, read_all
from gpulens.analyze.traces.times import decimal_to_ns, rewrite_times
from gpulens.errors import TraceFormatError

# orjson (the whole-document parse, the fallback for slices msgspec rejects) is not imported for
# the common path: it costs a few ms of every `gpulens trace` start-up.

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_LIMITS",
    "HELD_BYTES",
    "SCANNER",
    "Readable",
    "TraceLimits",
    "TraceSource",
    "check_limits",
    "decimal_to_ns",
    "load_trace",
    "rank_from_name",
]


_scan_slice: Callable[..., tuple[Any, ...] | None] | None = None
_check: Callable[[Any, int, int, int, int], None] | None = None
_value_end: Callable[[Any, int, int, int, int], int] | None = None
_non_space: Callable[[Any, int, int], int] | None = None
_walk: Callable[[Any, int, int, int, int], tuple[int, int, list[bytes]]] | None = None
_LimitExceeded: type[Exception] = ValueError
try:  # the C scanner (setup.py); a build without a compiler decodes every slice in Python
    from gpulens.analyze.traces import _scan

    _scan_slice, _check, _value_end = _scan.scan, _scan.check, _scan.value_end
    _non_space, _walk = _scan.non_space, _scan.members
    _LimitExceeded = _scan.LimitExceeded
except ImportError:  # pragma: no cover - an install without the compiled scanner
    pass
SCANNER = _scan_slice is not None  # whether the C scanner is built

DEFAULT_CHUNK_BYTES = 1 << 19
# The most text held at once outside the streamed events: one event (a slice that cannot be
# cut yet), the metadata around `traceEvents`, or a document parsed whole for the exact error.
HELD_BYTES = 64 << 20
_USE_STRUCTS = True  # stream slices through msgspec structs (False: orjson dicts, for tests)
_USE_SCANNER = True  # and through the C scanner first, where it is built (False: for tests)
# Text left to Python (by the scanner, or all of it without one) parsed by orjson before the
# msgspec schemas take over: their import (~12 ms) pays off on megabytes, not on the closing
# `Trace` spans that most traces leave to Python (a few kB).
_STRUCTS_AFTER = 1 << 20
_TRIES = 16  # boundary candidates tried per read block before reading more text
_OVERLAP = 1 << 12  # bytes searched again for a boundary that straddles two blocks

# `}` closing an element of the array, then `, {` (next element) or `]` (the array's end)
_BOUNDARY = re.compile(rb"\}\s*(?:,\s*\{|\])")
_END = re.compile(rb"\}\s*\]")
_NON_WS = re.compile(rb"[^ \t\r\n]")
_ROOT_KINDS = {ord('"'): "str", ord("t"): "bool", ord("f"): "bool", ord("n"): "NoneType"}
_RANK_PATTERNS = (
    re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[_\-.])r(\d+)(?=$|[_\-.]|of)", re.IGNORECASE),
)


class _NotStreamable(Exception):
    """The text cannot be cut into event slices; parse the whole file instead."""


class _NoTraceEvents(_NotStreamable):
    """The root object ended without a `traceEvents` key (its keys are given)."""

    def __init__(self, name: str, keys: list[str]) -> None:
        super().__init__("no traceEvents array found")
        self.error = _no_trace_events(name, keys)


def _no_trace_events(name: str, keys: list[str]) -> TraceFormatError:
    shown = ", ".join(keys[:8]) or "none"
    return TraceFormatError(
        f"{name}: no `traceEvents` in the JSON object (keys: {shown}); "
        "is this a PyTorch profiler trace?"
    )


def _limit_error(name: str, limits: TraceLimits, exc: BaseException, offset: int) -> Exception:
    """The InputTooLarge of a limit the scanner met (`_scan.LimitExceeded(kind, at)`)."""
    kind = exc.args[0] if exc.args else "nesting"
    where = f" (at byte {offset:,})" if offset >= 0 else ""
    if kind == "string":
        return too_large(
            name, f"a JSON string{where}", limits.max_string_bytes, "limits.max_string_bytes"
        )
    return too_large(
        name,
        f"the nesting of objects and arrays in one event{where}",
        limits.max_nesting,
        "limits.max_nesting",
        "levels",
    )


def check_limits(
    text: bytes | bytearray | memoryview,
    start: int,
    end: int,
    limits: TraceLimits,
    name: str,
    *,
    levels: int = 0,
    offset: int = 0,
) -> None:
    """InputTooLarge for a string longer than `limits.max_string_bytes` or nesting deeper than
    `limits.max_nesting` (+ `levels` around the events) in `text[start:end]`; any text, JSON or
    not. `offset`: where `text` starts in the input (for the message)."""
    if _check is None:  # pragma: no cover - without the C scanner the parsers' own limits hold
        return
    try:
        _check(text, start, end, limits.max_nesting + levels, limits.max_string_bytes)
    except _LimitExceeded as exc:
        at = exc.args[1] if len(exc.args) > 1 else -1
        raise _limit_error(name, limits, exc, offset + at) from None


# -- streaming parse -------------------------------------------------------------------------


class _Text:
    """A sliding window over the decompressed text (a bytearray: slices parse in place).

    Nothing is dropped until the first slice of events has been cut (`pinned`): up to then the
    window holds the text from the start anyway (the text before the array is kept for the
    metadata, and an uncut slice is kept whole), and a document that cannot be cut is parsed
    whole from it, even from a stream that cannot be read again. Runs of whitespace are never
    held: they are dropped as they are read.
    """

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.buf = bytearray()
        self.eof = False
        self.pinned = True  # drop nothing yet
        self.whole = True  # `buf` + the blocks not yet read are the whole text (but whitespace)
        self.dropped = 0  # bytes dropped before `buf[0]` (offsets in messages)

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
            self.dropped += keep_from
        if block:
            self.buf += block
        return keep_from

    def drop(self, pos: int) -> int:
        """Drop the text before `pos`; returns the shift applied."""
        del self.buf[:pos]
        self.dropped += pos
        self.whole = False
        return pos

    def skip_ws(self, pos: int) -> int:
        """The first byte at or after `pos` that is not whitespace (`len(buf)` at the end); the
        whitespace read past the window's end is dropped, its first byte kept (see
        _parse_slice)."""
        start = pos
        while True:
            found = _first_non_space(self.buf, pos)
            if found < len(self.buf):
                return found
            if self.eof:
                return len(self.buf)
            if len(self.buf) > start + 1:
                self.dropped += len(self.buf) - start - 1
                del self.buf[start + 1 :]
            pos = len(self.buf)
            self.more(0)

    def rest(self, pos: int) -> bytes | None:
        """The text from `pos` to the end (read now; kept in the window while pinned), or None
        when it is longer than HELD_BYTES."""
        while not self.eof:
            if len(self.buf) - pos > HELD_BYTES:
                return None
            pos -= self.more(pos)
        return bytes(self.buf[pos:]) if len(self.buf) - pos <= HELD_BYTES else None

    def held(self) -> tuple[bytes, bool]:
        """Up to HELD_BYTES (+ a block) of the whole text (only while `whole`), and whether that
        is all of it."""
        while not self.eof and len(self.buf) <= HELD_BYTES:
            self.more(0)
        return bytes(self.buf), self.eof


def _first_non_space(buf: bytearray, pos: int) -> int:
    if _non_space is not None:
        return _non_space(buf, pos, len(buf))
    m = _NON_WS.search(buf, pos)  # pragma: no cover - without the C scanner
    return len(buf) if m is None else m.start()  # pragma: no cover


def too_large_metadata(name: str) -> Exception:
    return TraceFormatError(
        f"{name}: the text outside `traceEvents` (the trace's metadata) is longer than "
        f"{HELD_BYTES >> 20} MiB; a PyTorch profiler trace keeps its events in `traceEvents`"
    )


def _find_end(buf: bytearray, pos: int, end: int, limits: TraceLimits) -> int:
    """`_scan.value_end`: the offset after the JSON value at `pos`, -1 if not before `end`."""
    if _value_end is not None:
        return _value_end(buf, pos, end, limits.max_nesting, limits.max_string_bytes)
    depth, i, quote = 0, pos, ord('"')  # pragma: no cover - without the C scanner
    while i < end:  # pragma: no cover
        ch = buf[i]
        if ch == quote:
            m = re.compile(rb'"(?:[^"\\]|\\.)*"').match(buf, i)
            if m is None:
                return -1
            i = m.end()
            if depth == 0:
                return i
            continue
        if ch in b"{[":
            depth += 1
        elif ch in b"}]":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and ch in b", \t\r\n":
            return i
        i += 1
    return -1  # pragma: no cover


class _SliceDecoder:
    """Decodes slices with the fastest schema that fits (schema.py), msgspec first.

    A slice that a schema rejects is tried with the next; once a later schema (not the last,
    most permissive one) has fitted, the earlier ones are not tried again for that trace, so a
    trace with float times or a category newer than the known ones costs one wasted attempt, not
    one per slice. Every slice is held to the limits: the C scanner checks them as it reads, and
    a slice it leaves to Python is checked before msgspec or orjson sees it.
    """

    def __init__(
        self, name: str, limits: TraceLimits, use_structs: bool = True, use_scanner: bool = True
    ) -> None:
        self.name = name
        self.limits = limits
        self.use_structs = use_structs
        self.first = 0
        self.scan = _scan_slice if use_structs and use_scanner else None
        self.error: Exception | None = None  # orjson's reason the last slice is not JSON
        self.offset = 0  # where the slice's text starts in the input (for messages)
        self.left_to_python = 0  # bytes of the slices the scanner did not read

    def decode(self, piece: memoryview) -> list[Any] | Scanned | None:
        """The slice's events: the C scanner's columns, else structs (past `_STRUCTS_AFTER`
        bytes), else orjson dicts; None if the text is not JSON. `piece` is the slice with its
        brackets."""
        limits = self.limits
        self.error = None
        if self.scan is not None:
            try:
                scanned = self.scan(
                    piece, 1, len(piece) - 1, limits.max_nesting, limits.max_string_bytes
                )
            except _LimitExceeded as exc:
                at = exc.args[1] if len(exc.args) > 1 else -1
                raise _limit_error(self.name, limits, exc, self.offset + at - 1) from None
            if scanned is not None:
                return scanned
        check_limits(piece, 1, len(piece) - 1, limits, self.name, offset=self.offset - 1)
        self.left_to_python += len(piece)
        try:
            if self.use_structs and self.left_to_python > _STRUCTS_AFTER:
                import msgspec  # imported with the schemas: only for slices left to Python

                decoders = struct_decoders()
                for i in range(self.first, len(decoders)):
                    try:
                        events: list[Any] = decoders[i].decode(piece)
                    except msgspec.ValidationError:  # a value of another type: the next schema
                        continue
                    except msgspec.DecodeError:  # not JSON: orjson decides (and says where)
                        break
                    if i < len(decoders) - 1:
                        self.first = i
                    return events
            import orjson

            try:
                return cast(list[Any], orjson.loads(piece))
            except orjson.JSONDecodeError as exc:
                self.error = exc
                return None
        except RecursionError:  # deeper than the parsers go (limits.max_nesting above theirs)
            raise _limit_error(self.name, limits, RecursionError("nesting"), -1) from None


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


def _invalid_before(decoder: _SliceDecoder, start: int, end: int) -> bool:
    """Whether the slice `buf[start:end]` just tried failed on text well before its end: then
    no later cut can parse either (a cut inside a string or an event fails at its end)."""
    error = decoder.error
    pos = getattr(error, "pos", None)
    return isinstance(pos, int) and pos < end - start - 1


def _cut(
    text: _Text, pos: int, resume: int, decoder: _SliceDecoder
) -> tuple[tuple[list[Any] | Scanned, int, int] | None, int]:
    """The first slice from `pos` that ends at an element boundary and parses, if any, and where
    the next search resumes.

    Boundaries are searched from `resume` on (at least `chunk_bytes` after `pos`), each once; at
    the end of the file, up to the array's end. Returns ((events, end of the slice, position
    just after the boundary match) or None, resume).
    """
    buf = text.buf
    decoder.offset = text.dropped + pos
    if len(buf) > resume:
        for tries, m in enumerate(_BOUNDARY.finditer(buf, resume), 1):
            events = _parse_slice(buf, pos, m.start() + 1, decoder)
            if events is not None:
                return (events, m.start() + 1, m.end()), resume
            if _invalid_before(decoder, pos, m.start() + 1):
                raise _NotStreamable(f"not valid JSON: {decoder.error}")
            resume = m.start() + 1
            if tries >= _TRIES and not text.eof:
                return None, resume
        resume = max(resume, len(buf) - _OVERLAP)
    if text.eof:
        for m in _END.finditer(buf, pos):
            events = _parse_slice(buf, pos, m.start() + 1, decoder)
            if events is not None:
                return (events, m.start() + 1, m.end()), resume
    return None, resume


def _stream_events(
    text: _Text, pos: int, builder: ColumnBuilder, chunk_bytes: int, limits: TraceLimits
) -> int:
    """Feed the array whose first element is at `pos` (> 0); returns the position after `]`."""
    name = builder.source
    decoder = _SliceDecoder(name, limits, _USE_STRUCTS, _USE_SCANNER)
    pos = text.skip_ws(pos)
    if text.buf[pos : pos + 1] == b"]":
        return pos + 1
    resume = pos + chunk_bytes
    check_at = 2 * chunk_bytes + (1 << 16)  # pending text is checked at each doubling
    while True:
        cut, resume = _cut(text, pos, resume, decoder)
        if cut is None:
            if text.eof:
                raise _NotStreamable("the events array does not end")
            pending = len(text.buf) - pos
            if pending >= check_at:  # a string or nesting past its limit stops us early
                check_limits(text.buf, pos, len(text.buf), limits, name, offset=text.dropped)
                check_at *= 2
            if pending > max(HELD_BYTES, 4 * chunk_bytes):
                raise TraceFormatError(
                    f"{name}: no end of an event within {HELD_BYTES >> 20} MiB from byte "
                    f"{text.dropped + pos:,}: an event that large is not a PyTorch profiler "
                    "event (or the text is not valid JSON there)"
                )
            shift = text.more(pos - 1)  # keep the byte before `pos` for the parse's "["
            pos -= shift
            resume -= shift
            continue
        events, end, after = cut
        with memoryview(text.buf) as view, view[pos:end] as piece:
            builder.add(events, piece)
        del events
        if builder.events > limits.max_events:
            raise _too_many_events(name, limits)
        text.pinned = False
        if text.buf[after - 1] == 0x5D:  # "]"
            return after
        pos = after - 1
        resume = pos + chunk_bytes


def _too_many_events(name: str, limits: TraceLimits) -> Exception:
    return too_large(name, "the number of events", limits.max_events, "limits.max_events", "events")


def _not_json(word: str) -> NoReturn:
    """`json.loads`'s hook for NaN and ±Infinity, which strict JSON does not allow."""
    raise ValueError(f"{word} is not JSON")


def _key(raw: bytes) -> str | None:
    """A member's key (the JSON string's text between its quotes) as a str, None if not one."""
    try:
        key = json.loads(b'"' + raw + b'"')
    except ValueError:  # not a JSON string (or not UTF-8)
        return None
    return key if isinstance(key, str) else None


def _members(
    buf: bytearray, pos: int, end: int, limits: TraceLimits
) -> tuple[int, int, list[bytes]]:
    """`_scan.members`: the root object's members from `pos`, up to a top-level "traceEvents"
    (1, its value's offset), the object's end (2), the end of the text (0, the member to start
    again from) or text that is not JSON (-1); the raw keys passed (at most 8)."""
    if _walk is not None:
        return _walk(buf, pos, end, limits.max_nesting, limits.max_string_bytes)
    keys: list[bytes] = []  # pragma: no cover - without the C scanner: the same, in Python
    member = pos  # pragma: no cover
    while True:  # pragma: no cover
        pos = _first_non_space(buf, pos)
        if pos >= end:
            return 0, member, keys
        if buf[pos] == 0x2C:  # ","
            pos = member = pos + 1
            continue
        if buf[pos] == 0x7D:  # "}"
            return 2, pos + 1, keys
        if buf[pos] != 0x22:  # '"'
            return -1, pos, keys
        key_end = _find_end(buf, pos, end, limits)
        if key_end < 0:
            return 0, member, keys
        colon = _first_non_space(buf, key_end)
        value = _first_non_space(buf, colon + 1)
        if value >= end:
            return 0, member, keys
        if buf[colon] != 0x3A:  # ":"
            return -1, colon, keys
        if buf[pos + 1 : key_end - 1] == b"traceEvents":
            return 1, value, keys
        value_end = _find_end(buf, value, end, limits)
        if value_end < 0:
            return 0, member, keys
        keys = keys if len(keys) >= 8 else [*keys, bytes(buf[pos + 1 : key_end - 1])]
        pos = member = value_end


def _parse_stream(
    text: _Text, builder: ColumnBuilder, chunk_bytes: int, limits: TraceLimits, name: str
) -> dict[str, Any] | None:
    """Metadata (None for a bare array) after streaming every event into `builder`."""
    first = text.skip_ws(0)
    if first >= len(text.buf):
        raise TraceFormatError(f"{name}: empty file, expected a PyTorch profiler JSON trace")
    lead = text.buf[first]
    if lead == 0x5B:  # "[": a bare array of events
        end = _stream_events(text, first + 1, builder, chunk_bytes, limits)
        if text.skip_ws(end) < len(text.buf):
            raise _NotStreamable("text after the events array")
        return None
    if lead != 0x7B:  # "{"
        _not_an_object(text, first, name)
    # the root object's members: only a top-level `traceEvents` is the events
    pos, keys = first + 1, list[str]()
    head_held = True  # the text before `pos` is all held (for the metadata)
    while True:
        if pos > HELD_BYTES:  # no more metadata kept: the walk goes on, for the error
            head_held = False
            text.pinned = False
            pos -= text.drop(pos)
        n = len(text.buf)
        try:
            status, at, raw_keys = _members(text.buf, pos, n, limits)
        except _LimitExceeded as exc:
            where = exc.args[1] if len(exc.args) > 1 else -1
            raise _limit_error(name, limits, exc, text.dropped + where) from None
        keys += [k for k in map(_key, raw_keys) if k is not None][: 8 - len(keys)]
        if status == 1:
            value = at
            break
        if status == 2:
            raise _NoTraceEvents(name, keys)
        if status < 0:
            raise _NotStreamable("the JSON object is not valid JSON")
        if text.eof:
            raise _NotStreamable("the JSON object does not end")
        pos = at
        if n - pos > HELD_BYTES:
            raise too_large_metadata(name)
        need = max(1, 2 * (n - pos))  # the member at `pos` is tried on twice the text: linear
        while not text.eof and len(text.buf) - pos < need:
            text.more(0)
    if text.buf[value : value + 1] != b"[":
        kind = _ROOT_KINDS.get(text.buf[value], "number") if value < len(text.buf) else "nothing"
        kind = "dict" if text.buf[value : value + 1] == b"{" else kind
        raise TraceFormatError(f"{name}: `traceEvents` is a {kind}, not a list")
    if not head_held:
        raise too_large_metadata(name)
    head = bytes(text.buf[:value])
    end = _stream_events(text, value + 1, builder, chunk_bytes, limits)
    rest = text.rest(end)
    if rest is None:
        raise too_large_metadata(name)
    try:
        doc = json.loads(head + b"[]" + rest, parse_constant=_not_json)
    except ValueError as exc:  # not JSON (JSONDecodeError), or not UTF-8
        raise _NotStreamable("metadata is not valid JSON") from exc
    except RecursionError:
        raise _limit_error(name, limits, RecursionError("nesting"), -1) from None
    if not isinstance(doc, dict):
        raise _NotStreamable("root is not an object")
    doc.pop("traceEvents", None)
    return doc


def _not_an_object(text: _Text, first: int, name: str) -> NoReturn:
    """The error for a text whose root is not an object or an array, from its first bytes: a
    file of NUL bytes or other garbage is refused at once, whatever its size."""
    import orjson

    while not text.eof and len(text.buf) < first + 4096:
        text.more(0)
    if text.eof and text.whole and len(text.buf) <= HELD_BYTES:
        raise _NotStreamable("not a JSON object")  # small: parsed whole, for the exact error
    held = bytes(text.buf[: first + 4096])
    try:
        orjson.loads(held)
    except orjson.JSONDecodeError as exc:
        if exc.pos < len(held) - 1:  # before the cut: the text is not JSON
            raise TraceFormatError(f"{name}: not valid JSON ({exc})") from None
    kind = _ROOT_KINDS.get(text.buf[first], "number")
    raise TraceFormatError(
        f"{name}: the JSON root is a {kind}; expected an object with `traceEvents` (or a bare "
        "array of events)"
    )


# -- whole-document parse --------------------------------------------------------------------


def _exact_events(raw: bytes, name: str) -> list[Any]:
    import orjson

    try:
        doc = orjson.loads(rewrite_times(raw))
    except orjson.JSONDecodeError as exc:  # a time beyond int64 ns
        raise _bad_times(name, exc) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else []


def _bad_times(name: str, exc: Exception) -> TraceFormatError:
    return TraceFormatError(
        f"{name}: a `ts` or `dur` is out of range ({exc}): times are µs that fit in 64-bit "
        "integer nanoseconds (±292 years)"
    )


def _parse_whole(
    raw: bytes, builder: ColumnBuilder, name: str, limits: TraceLimits
) -> dict[str, Any] | None:
    """Parse the whole document at once; the source of precise format errors."""
    import orjson

    check_limits(raw, 0, len(raw), limits, name, levels=2)  # the root and the array
    doc: Any
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"{name}: not valid JSON ({exc})") from exc
    if isinstance(doc, list):
        events: Any = doc
        doc = None
    elif not isinstance(doc, dict):
        raise TraceFormatError(
            f"{name}: the JSON root is a {type(doc).__name__}; expected an object with "
            "`traceEvents` (or a bare array of events)"
        )
    else:
        events = doc.pop("traceEvents", None)
        if events is None:
            raise _no_trace_events(name, list(doc))
        if not isinstance(events, list):
            raise TraceFormatError(
                f"{name}: `traceEvents` is a {type(events).__name__}, not a list"
            )
    if len(events) > limits.max_events:
        raise _too_many_events(name, limits)
    builder.add(events, raw, lambda: _exact_events(raw, name))
    return cast(dict[str, Any] | None, doc)


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


def _streamed(
    reader: Reader, chunk_bytes: int, limits: TraceLimits
) -> tuple[ColumnBuilder, dict[str, Any] | None]:
    """The streaming parse; a document it cannot cut is parsed whole (into a fresh builder)
    when it is at most HELD_BYTES, for the exact error (or the rare valid document that cannot
    be cut); a larger one gets the streaming parser's reason."""
    block = max(chunk_bytes, 1 << 16)
    text = _Text(blocks(reader, block, limits.max_inflated_bytes))
    builder = ColumnBuilder(reader.name)
    try:
        return builder, _parse_stream(text, builder, chunk_bytes, limits, reader.name)
    except _NoTraceEvents as exc:  # the walk over the root's members says which keys it has
        raise exc.error from None
    except _NotStreamable as exc:
        reason = exc
    raw: bytes | None = None
    if text.whole:
        held, complete = text.held()
        raw = held if complete else None
    elif reader.again():
        raw = _read_held(reader, limits)
    else:
        raise TraceFormatError(
            f"{reader.name}: not valid JSON, or not a trace ({reason}); this stream cannot be "
            "read again to say exactly where: load the file, or its bytes, for that"
        ) from None
    if raw is None:
        raise TraceFormatError(
            f"{reader.name}: not valid JSON, or not a trace ({reason}); the file is too large "
            f"(over {HELD_BYTES >> 20} MiB) to be parsed whole for the exact place"
        ) from None
    builder = ColumnBuilder(reader.name)
    return builder, _parse_whole(not_empty(raw, reader.name), builder, reader.name, limits)


def _read_held(reader: Reader, limits: TraceLimits) -> bytes | None:
    """The input read again from the start, if it is at most HELD_BYTES (else None)."""
    out = bytearray()
    for block in blocks(reader, 1 << 20, limits.max_inflated_bytes):
        out += block
        if len(out) > HELD_BYTES:
            return None
    return bytes(out)


def load_trace(
    source: TraceSource,
    rank: int | None = None,
    *,
    name: str,
    chunk_bytes: int | None = DEFAULT_CHUNK_BYTES,
    limits: TraceLimits = DEFAULT_LIMITS,
) -> Trace:
    """Parse one Kineto trace (JSON or gzip, object or bare array) as a `Trace`.

    `source`: the trace's bytes, or a binary stream (`read(n)`), read from where it stands;
    the caller opens and closes it. `name`: what errors and `Trace.source` call it (a path, an
    upload's name); its last `/` part is searched for a rank. Rank: `distributedInfo.rank`, else
    the name (`rank_3`, `_r3`, `rank3`), else `rank`. `chunk_bytes`: size of the slices streamed
    through the parser; None parses the whole document at once (same result, memory ≈ 10× the
    JSON). `limits`: how much is read before InputTooLarge (the `limits.*` settings). Raises
    `TraceFormatError` naming the trace and the problem, or `InputTooLarge`.
    """
    reader = Reader(source, name)
    with _gc_paused():
        metadata: dict[str, Any] | None
        if chunk_bytes is None:
            builder = ColumnBuilder(name)
            raw = read_all(reader, limits.max_inflated_bytes)
            metadata = _parse_whole(raw, builder, name, limits)
        else:
            builder, metadata = _streamed(reader, max(1, chunk_bytes), limits)
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
