"""The one Kineto (PyTorch profiler) trace reader: a file in, a columnar `Trace` out.

This is the documented exception to "analyze is pure": like HTA's loader it reads the file; every
other module under `analyze/traces/` takes a `Trace` and does no I/O.

How it reads (see docs/traces.md):

* `.json` or gzip (sniffed from the magic bytes, so `.json.gz`, `.gz` or any name works); a JSON
  object with `traceEvents` or a legacy bare JSON array of events.
* Bounded memory: the decompressed text is kept once; the `traceEvents` array is cut into chunks
  of about `chunk_bytes` at event boundaries (`}, {` at the top level of the array, checked by
  parsing), each chunk is parsed with orjson, turned into numpy columns in one pass and dropped
  before the next. Peak ≈ the JSON size + one parsed chunk + the columns (≈ 90 B per event).
* Exact times: `ts` / `dur` are µs with up to 3 decimals. Integers are multiplied by 1000.
  Floats from orjson are used while |value| < 2**42 µs (50 days: relative times), where
  `rint(value * 1000)` is provably the exact ns (parse error + product rounding < 0.5 ns); up to
  2**53 ns they are kept where a vectorised check shows the ns is the only one whose decimal
  text parses to that float. Otherwise (absolute epoch µs like 1712195495519689.047, where float64
  keeps only ~0.25 µs) the chunk is re-parsed after its `"ts"` / `"dur"` numbers are rewritten,
  as text, to integer ns (regex passes, `decimal_to_ns` for unusual forms); later chunks of the
  file go straight to the text path.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Generator
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gpulens.analyze.traces.model import (
    MISSING,
    PHASES,
    EventTable,
    FlowTable,
    Ints,
    Trace,
)
from gpulens.errors import TraceFormatError

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
EXACT_FLOAT_LIMIT_US = float(2**42)  # below this, rint(float_us * 1000) is the exact ns

_SPLIT = re.compile(rb"\}\s*,\s*\{")
_END = re.compile(rb"\}\s*\]")
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_END_OF_NUMBER = rb"(?=\s*[,}\]])"
# Text rewrites of µs numbers to integer ns, most common forms first and without a Python call
# per number: "12" → "12000", "12.345" → "12345", "0.047" → "47"; anything else (more than 3
# decimals, fewer than 3, exponents) goes through `decimal_to_ns` in the last pass. One pattern
# per key so that each starts with a literal (fast scanning); a `"ts"` inside a JSON string is
# written `\"ts\"` and cannot match.
_TIME_REWRITES = tuple(
    (re.compile(key + rb"(\s*:\s*)" + number + _END_OF_NUMBER), template)
    for key in (rb'"ts"', rb'"dur"')
    for number, template in (
        (rb"(-?[1-9]\d*)", rb"\g<0>000"),
        (rb"(-?[1-9]\d*)\.(\d{3})", key + rb"\1\2\3"),
        (rb"(-?)0\.(?:00(\d)|0(\d\d)|(\d{3}))", key + rb"\1\2\3\4\5"),
    )
)
_TIME_OTHER = tuple(
    re.compile(key + rb"(\s*:\s*)(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)" + _END_OF_NUMBER)
    for key in (rb'"ts"', rb'"dur"')
)
_HAS_FRACTION = re.compile(rb"[.eE]")
_PHASE_CODE = {p: i for i, p in enumerate(PHASES)}
_FLOW_PHASES = {"s": 0, "f": 1, "t": 2}
_RANK_PATTERNS = (
    re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[_\-.])r(\d+)(?=$|[_\-.]|of)", re.IGNORECASE),
)


def decimal_to_ns(text: bytes | str) -> int:
    """A decimal µs number written as text (`"1712195495519689.047"`) → exact integer ns.

    More than 3 decimals round half to even; exponents are allowed. Raises ValueError otherwise.
    """
    raw = text.decode() if isinstance(text, bytes) else text
    if "e" not in raw and "E" not in raw:
        neg = raw.startswith("-")
        whole, _, frac = raw.lstrip("-").partition(".")
        if whole.isdigit() and (frac == "" or frac.isdigit()) and len(frac) <= 3:
            ns = int(whole) * 1000 + (int(frac.ljust(3, "0")) if frac else 0)
            return -ns if neg else ns
    try:
        return int((Decimal(raw) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {raw!r}") from None


def _rewrite_times(chunk: bytes) -> bytes:
    """`"ts": 1712195495519689.047` → `"ts": 1712195495519689047` (integer ns) in JSON text."""
    for pattern, template in _TIME_REWRITES:
        chunk = pattern.sub(template, chunk)

    def other(m: re.Match[bytes]) -> bytes:
        number = m.group(2)
        if not _HAS_FRACTION.search(number):  # already rewritten above
            return m.group(0)
        return m.group(0)[: m.start(2) - m.start(0)] + str(decimal_to_ns(number)).encode()

    for pattern in _TIME_OTHER:
        chunk = pattern.sub(other, chunk)
    return chunk


def _to_ns(values: list[Any], already_ns: bool) -> Ints | None:
    """µs numbers → exact int64 ns, or None when float64 cannot be trusted (re-parse as text)."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.asarray(values)
    except (ValueError, OverflowError):
        return None
    if arr.dtype.kind in "iu":
        if already_ns:
            return arr.astype(np.int64)
        if int(np.abs(arr).max()) >= 2**63 // 1000:
            return None
        return arr.astype(np.int64) * 1000
    if arr.dtype.kind != "f" or already_ns or not np.isfinite(arr).all():
        return None
    ns = np.rint(arr * 1000.0)
    if float(np.abs(arr).max()) < EXACT_FLOAT_LIMIT_US:
        return ns.astype(np.int64)
    if float(np.abs(ns).max()) >= 2.0**53:
        return None
    # Larger values: keep `ns` only where it is provably the one integer ns whose decimal µs
    # text parses to this float (its neighbours parse to other floats); else read the text.
    ints = ns.astype(np.int64)
    unique = (ints / 1000.0 == arr) & ((ints - 1) / 1000.0 != arr) & ((ints + 1) / 1000.0 != arr)
    return ints if bool(unique.all()) else None


OCCUPANCY_ARG = "est. achieved occupancy %"


def _as_float(value: Any) -> float:
    if type(value) is int or type(value) is float:
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return float("nan")
    return float("nan")


def _as_int(value: Any) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return MISSING
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return MISSING


class _Builder:
    """Accumulates the columns chunk by chunk; strings are interned."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.names: dict[str, int] = {}
        self.categories: dict[str, int] = {}
        self.event_parts: list[dict[str, np.ndarray[Any, Any]]] = []
        self.flow_parts: list[dict[str, np.ndarray[Any, Any]]] = []
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.count = 0
        self.exact_text = False  # set once a chunk needed its times read as text

    def add_chunk(
        self, events: list[Any], reparse_exact: Callable[[], list[Any]], path: Path
    ) -> None:
        """Convert one parsed chunk; `reparse_exact` re-parses it with times as integer ns."""
        parts = self._columns(events, already_ns=False)
        if parts is None:
            self.exact_text = True
            self.add_exact_chunk(reparse_exact(), path)
            return
        self._append(len(events), parts)

    def add_exact_chunk(self, events: list[Any], path: Path) -> None:
        """A chunk parsed after `_rewrite_times`: every `ts` / `dur` is already integer ns."""
        parts = self._columns(events, already_ns=True)
        if parts is None:
            raise TraceFormatError(
                f"{path}: a `ts` or `dur` is not a number of µs (e.g. a string or null)"
            )
        self._append(len(events), parts)

    def _append(
        self,
        count: int,
        parts: tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]],
    ) -> None:
        self.count += count
        ev, fl = parts
        self.event_parts.append(ev)
        self.flow_parts.append(fl)

    def _columns(
        self, events: list[Any], already_ns: bool
    ) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, np.ndarray[Any, Any]]] | None:
        names, cats = self.names, self.categories
        base = self.count
        idx: list[int] = []
        ts: list[Any] = []
        dur: list[Any] = []
        has_dur: list[bool] = []
        phase: list[int] = []
        cat: list[int] = []
        name: list[int] = []
        pid: list[int] = []
        tid: list[int] = []
        stream: list[int] = []
        corr: list[int] = []
        ext: list[int] = []
        occ: list[float] = []
        nan = float("nan")
        f_idx: list[int] = []
        f_ts: list[Any] = []
        f_phase: list[int] = []
        f_cat: list[int] = []
        f_id: list[int] = []
        f_pid: list[int] = []
        f_tid: list[int] = []
        other = _PHASE_CODE["other"]
        for i, e in enumerate(events):
            if type(e) is not dict:
                raise TraceFormatError(
                    f"{self.path}: traceEvents[{base + i}] is not an object: {e!r:.80}"
                )
            ph = e.get("ph")
            if ph == "M":
                self._metadata(e)
                continue
            c = e.get("cat")
            if c is None:
                ci = -1
            else:
                c = str(c)
                ci = cats.get(c, -1)
                if ci < 0:
                    ci = cats[c] = len(cats)
            t = e.get("ts", 0)
            if ph in _FLOW_PHASES:
                f_idx.append(base + i)
                f_ts.append(t)
                f_phase.append(_FLOW_PHASES[ph])
                f_cat.append(ci)
                f_id.append(_as_int(e.get("id")))
                f_pid.append(_as_int(e.get("pid")))
                f_tid.append(_as_int(e.get("tid")))
                continue
            n = e.get("name")
            if n is None:
                ni = -1
            else:
                n = str(n)
                ni = names.get(n, -1)
                if ni < 0:
                    ni = names[n] = len(names)
            idx.append(base + i)
            ts.append(t)
            d = e.get("dur")
            if d is None:
                dur.append(0)
                has_dur.append(False)
            else:
                dur.append(d)
                has_dur.append(True)
            phase.append(_PHASE_CODE.get(ph, other) if isinstance(ph, str) else other)
            cat.append(ci)
            name.append(ni)
            pid.append(_as_int(e.get("pid")))
            tid.append(_as_int(e.get("tid")))
            a = e.get("args")
            if type(a) is dict:
                s = a.get("stream")
                stream.append(MISSING if s is None else _as_int(s))
                r = a.get("correlation")
                corr.append(MISSING if r is None else _as_int(r))
                x = a.get("External id")
                ext.append(MISSING if x is None else _as_int(x))
                o = a.get(OCCUPANCY_ARG)
                occ.append(nan if o is None else _as_float(o))
            else:
                stream.append(MISSING)
                corr.append(MISSING)
                ext.append(MISSING)
                occ.append(nan)
        ts_ns = _to_ns(ts, already_ns)
        dur_ns = _to_ns(dur, already_ns)
        f_ts_ns = _to_ns(f_ts, already_ns)
        if ts_ns is None or dur_ns is None or f_ts_ns is None:
            return None
        i64 = np.int64
        ev: dict[str, np.ndarray[Any, Any]] = {
            "index": np.asarray(idx, dtype=i64),
            "ts_ns": ts_ns,
            "dur_ns": dur_ns,
            "has_dur": np.asarray(has_dur, dtype=np.bool_),
            "phase": np.asarray(phase, dtype=np.int32),
            "category": np.asarray(cat, dtype=np.int32),
            "name": np.asarray(name, dtype=np.int32),
            "pid": np.asarray(pid, dtype=i64),
            "tid": np.asarray(tid, dtype=i64),
            "stream": np.asarray(stream, dtype=i64),
            "correlation": np.asarray(corr, dtype=i64),
            "external_id": np.asarray(ext, dtype=i64),
            "occupancy": np.asarray(occ, dtype=np.float64),
        }
        fl: dict[str, np.ndarray[Any, Any]] = {
            "index": np.asarray(f_idx, dtype=i64),
            "ts_ns": f_ts_ns,
            "phase": np.asarray(f_phase, dtype=np.int32),
            "category": np.asarray(f_cat, dtype=np.int32),
            "flow_id": np.asarray(f_id, dtype=i64),
            "pid": np.asarray(f_pid, dtype=i64),
            "tid": np.asarray(f_tid, dtype=i64),
        }
        return ev, fl

    def _metadata(self, e: dict[str, Any]) -> None:
        args = e.get("args")
        label = args.get("name") if isinstance(args, dict) else None
        if not isinstance(label, str):
            return
        if e.get("name") == "process_name":
            self.process_names[_as_int(e.get("pid"))] = label
        elif e.get("name") == "thread_name":
            self.thread_names[(_as_int(e.get("pid")), _as_int(e.get("tid")))] = label

    def tables(self) -> tuple[EventTable, FlowTable]:
        if not self.event_parts:
            empty = self._columns([], already_ns=False)
            assert empty is not None
            self._append(0, empty)

        def cat(parts: list[dict[str, np.ndarray[Any, Any]]], key: str) -> np.ndarray[Any, Any]:
            return np.concatenate([p[key] for p in parts])

        ev = EventTable(**{k: cat(self.event_parts, k) for k in EventTable.__dataclass_fields__})
        fl = FlowTable(**{k: cat(self.flow_parts, k) for k in FlowTable.__dataclass_fields__})
        self.event_parts.clear()
        self.flow_parts.clear()
        return ev, fl


def _exact_chunk(text: bytes) -> Callable[[], list[Any]]:
    return lambda: list(orjson.loads(b"[" + _rewrite_times(text) + b"]"))


def _exact_events(raw: bytes) -> list[Any]:
    doc = orjson.loads(_rewrite_times(raw))
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else []


def _read_text(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read the trace file ({exc.strerror})") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except EOFError as exc:
            raise TraceFormatError(
                f"{path}: truncated gzip file (the compressed stream ends early); "
                "copy the trace again"
            ) from exc
        except (OSError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: corrupt gzip file ({exc})") from exc
    if not data.strip():
        raise TraceFormatError(f"{path}: empty file, expected a PyTorch profiler JSON trace")
    return data


def _skip_ws(raw: bytes, pos: int) -> int:
    n = len(raw)
    while pos < n and raw[pos] in b" \t\r\n":
        pos += 1
    return pos


def _parse_piece(text: bytes, exact_text: bool) -> list[Any]:
    parsed = orjson.loads(b"[" + (_rewrite_times(text) if exact_text else text) + b"]")
    return parsed if isinstance(parsed, list) else []


def _chunks(
    raw: bytes, start: int, chunk_bytes: int, builder: _Builder
) -> Generator[tuple[bytes, list[Any]], None, int]:
    """(text, parsed events) per chunk of the array whose first element is at `start`.

    The array's closing bracket position is returned through StopIteration's value. Raises
    ValueError when the array cannot be cut (the caller then parses the whole file).
    """
    pos = _skip_ws(raw, start)
    if raw[pos : pos + 1] == b"]":
        return pos + 1
    n = len(raw)
    while True:
        target = pos + chunk_bytes
        if target < n:
            for m in _SPLIT.finditer(raw, target):
                text = raw[pos : m.start() + 1]
                try:
                    parsed = _parse_piece(text, builder.exact_text)
                except orjson.JSONDecodeError:
                    continue
                yield text, parsed
                pos = m.end() - 1
                break
            else:
                target = n
            if target < n:
                continue
        for m in _END.finditer(raw, pos):
            text = raw[pos : m.start() + 1]
            try:
                parsed = _parse_piece(text, builder.exact_text)
            except orjson.JSONDecodeError:
                continue
            yield text, parsed
            return m.end()
        raise ValueError("the events array does not end")


def _parse_chunked(
    raw: bytes, builder: _Builder, path: Path, chunk_bytes: int
) -> dict[str, Any] | None:
    """Metadata dict (None for a bare array) after feeding every chunk; ValueError if impossible."""
    head = _skip_ws(raw, 0)
    if raw[head : head + 1] == b"[":
        start, metadata = head + 1, None
    else:
        m = _TRACE_EVENTS.search(raw)
        if m is None:
            raise ValueError("no traceEvents array found")
        start = m.end()
    gen = _chunks(raw, start, chunk_bytes, builder)
    end: int
    while True:
        try:
            text, parsed = next(gen)
        except StopIteration as stop:
            end = int(stop.value)
            break
        if builder.exact_text:
            builder.add_exact_chunk(parsed, path)
        else:
            builder.add_chunk(parsed, _exact_chunk(text), path)
        del parsed, text
    if raw[head : head + 1] == b"[":
        if raw[end:].strip():
            raise ValueError("text after the events array")
        return metadata
    doc = orjson.loads(raw[: start - 1] + b"[]" + raw[end:])
    if not isinstance(doc, dict):
        raise ValueError("root is not an object")
    doc.pop("traceEvents", None)
    return doc


def _parse_whole(raw: bytes, builder: _Builder, path: Path) -> dict[str, Any] | None:
    """Parse the whole document at once; the source of precise format errors."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from exc
    if isinstance(doc, list):
        builder.add_chunk(doc, lambda: _exact_events(raw), path)
        return None
    if not isinstance(doc, dict):
        raise TraceFormatError(
            f"{path}: the JSON root is a {type(doc).__name__}; expected an object with "
            "`traceEvents` (or a bare array of events)"
        )
    events = doc.pop("traceEvents", None)
    if events is None:
        keys = ", ".join(sorted(doc)[:8]) or "none"
        raise TraceFormatError(
            f"{path}: no `traceEvents` in the JSON object (keys: {keys}); "
            "is this a PyTorch profiler trace?"
        )
    if not isinstance(events, list):
        raise TraceFormatError(f"{path}: `traceEvents` is a {type(events).__name__}, not a list")
    builder.add_chunk(events, lambda: _exact_events(raw), path)
    return doc


def rank_from_name(path: str | Path) -> int | None:
    """Rank in a file name: `rank_3`, `rank-3`, `rank3`, `trainer_r3`, `r3of8` → 3."""
    name = Path(path).name
    for pattern in _RANK_PATTERNS:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def _rank(metadata: dict[str, Any] | None, path: Path, rank: int | None) -> tuple[int | None, str]:
    info = metadata.get("distributedInfo") if metadata else None
    if isinstance(info, dict):
        value = _as_int(info.get("rank"))
        if value >= 0:
            return value, "distributedInfo"
    by_name = rank_from_name(path)
    if by_name is not None:
        return by_name, "file name"
    if rank is not None:
        return rank, "argument"
    return None, "unknown"


def load_trace(
    path: str | Path, rank: int | None = None, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Trace:
    """Load one Kineto trace file (`.json` / `.json.gz`, object or bare array) as a `Trace`.

    Rank: `distributedInfo.rank`, else the file name (`rank_3`, `_r3`, `rank3`), else `rank`.
    Raises `TraceFormatError` naming the file and the problem.
    """
    p = Path(path)
    raw = _read_text(p)
    builder = _Builder(p)
    try:
        metadata = _parse_chunked(raw, builder, p, max(1, chunk_bytes))
    except (ValueError, orjson.JSONDecodeError):
        builder = _Builder(p)
        metadata = _parse_whole(raw, builder, p)
    del raw
    events, flows = builder.tables()
    meta = metadata or {}
    resolved, source = _rank(meta, p, rank)
    return Trace(
        path=str(p),
        rank=resolved,
        rank_source=source,
        events=events,
        flows=flows,
        names=list(builder.names),
        categories=list(builder.categories),
        metadata=meta,
        process_names=builder.process_names,
        thread_names=builder.thread_names,
        raw_event_count=builder.count,
    )
