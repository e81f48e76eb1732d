"""Parsed Kineto events → numpy columns, one chunk at a time (pure).

`ColumnBuilder.add(events, text)` takes one slice of `traceEvents` — the C scanner's columns
(`_scan.c`: its string indices are interned and its arrays selected with numpy), msgspec structs
(schema.py) or orjson dicts — (and that slice's JSON text, for exact times) and keeps only numpy
columns. Parsed events: field values are pulled out with C-level `map(attrgetter)` / `map(dict.get,
…)` passes, not a Python loop per event (an absent struct field holds what `dict.get` returns for an
absent key, so both give the same columns), and strings are interned into `names` / `categories`.
Values of an unexpected type (a numeric string, a float pid) take a per-value path with the same
meaning. Each chunk's rows are written once into one buffer per column, grown in place;
`tables()` cuts the buffers to size.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress, repeat
from operator import attrgetter, eq, is_, is_not
from typing import Any

import numpy as np

from gpulens.analyze.traces.event_fields import (
    ABSENT,
    KNOWN_CATEGORIES,
    KNOWN_PHASES,
    OCCUPANCY_ARG,
)
from gpulens.analyze.traces.model import MISSING, PHASES, EventTable, FlowTable
from gpulens.analyze.traces.record import record_fields
from gpulens.analyze.traces.times import (
    ints_as_ns,
    numbers_in_text,
    rewrite_times,
    texts_to_ns,
    to_ns,
)
from gpulens.errors import TraceFormatError

_first_seen: Callable[[Any, int], list[int]] | None
try:  # the C scanner's one-pass first-seen order (its slices are the only callers)
    from gpulens.analyze.traces._scan import first_seen as _first_seen
except ImportError:  # pragma: no cover - built without a C compiler
    _first_seen = None

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_META = len(PHASES)
_FLOW_PHASES = {"s": 0, "f": 1, "t": 2}
_PHASE_CODE: dict[Any, int] = {p: i for i, p in enumerate(PHASES)}
_PHASE_CODE.update({"M": _META, **{p: _META + 1 + i for p, i in _FLOW_PHASES.items()}})
_OTHER = PHASES.index("other")
_ABSENT = ABSENT
_EMPTY: dict[str, Any] = {}
# Struct rows (schema.py, msgspec): filled by `struct_decoders` when the loader first needs them
# (the C scanner reads most traces whole, and then neither is imported). The row types whose
# values have the declared types (a number field becomes a column in one pass); attribute
# getters per (row type, key), an absent field holding the default `dict.get` is given for that
# key below; the `args` used for an event with none.
_TYPED_ROWS: set[type] = set()
_GETTERS: dict[tuple[type, str], Callable[[Any], Any]] = {}
_NO_ARGS: dict[type, Any] = {}
_ARG_ATTRIBUTES = (  # the keys of `args` read, and their struct attributes
    ("name", "name"),
    ("stream", "stream"),
    ("correlation", "correlation"),
    ("External id", "external_id"),
    (OCCUPANCY_ARG, "occupancy"),
)
# Rows whose `ph` and `cat` are among the known shared strings: coded in one pass each.
_KNOWN_ROWS: set[type] = set()
_INT_TIME_ROWS: set[type] = set()  # rows whose times are integers (µs): exact as read
_KNOWN_PHASE_CODE: dict[Any, int] = {p: _PHASE_CODE.get(p, _OTHER) for p in (*KNOWN_PHASES, None)}
_KNOWN_CATEGORY_INDEX: dict[Any, int] = {c: i for i, c in enumerate((*KNOWN_CATEGORIES, None))}
_KNOWN_CATEGORY_NAMES: list[str | None] = [*KNOWN_CATEGORIES, None]
_NS_PER_US = 1000
_MAX_INT_US = (1 << 63) // _NS_PER_US  # larger integer µs overflow int64 ns
_ARGS_TYPES: set[type] = set()
Reparse = Callable[[], list[Any]]
# The C scanner's result for a slice (`_scan.c`): (count, strings, column bytes...).
Scanned = tuple[Any, ...]
Text = bytes | memoryview  # JSON text, or a view of it
_get = dict.get

Array = np.ndarray[Any, Any]


def struct_decoders() -> tuple[Any, ...]:
    """schema.py's msgspec decoders, tried in turn on a slice the C scanner leaves to Python,
    with the column getters of their row types registered (imports msgspec on first use)."""
    from gpulens.analyze.traces import schema

    if schema.TraceEvent not in _NO_ARGS:
        events = (schema.TraceEvent, schema.TypedEvent, schema.KnownEvent, schema.KnownIntEvent)
        fields: tuple[str, ...] = schema.TraceEvent.__struct_fields__
        for event in events:
            _GETTERS.update({(event, key): attrgetter(key) for key in fields})
        for args in (schema.Args, schema.TypedArgs):
            _GETTERS.update({(args, key): attrgetter(a) for key, a in _ARG_ATTRIBUTES})
            _ARGS_TYPES.add(args)
        _TYPED_ROWS.update((*events[1:], schema.TypedArgs))
        _KNOWN_ROWS.update((schema.KnownEvent, schema.KnownIntEvent))
        _INT_TIME_ROWS.add(schema.KnownIntEvent)
        _NO_ARGS.update({event: schema.TypedArgs() for event in events[1:]})
        # last, the flag tested above: a racing thread fills the same values again, and one
        # that finds it set finds the rest filled
        _NO_ARGS[schema.TraceEvent] = schema.Args()
    return schema.DECODERS


def as_int(value: Any) -> int:
    """An integer field: ints as is, numeric strings and integral floats converted, else -1.

    These fields are identifiers (pids, streams, correlation and flow ids): one beyond int64
    (a 64-bit unsigned hash) is kept as the int64 with the same low 64 bits, so equal ids stay
    equal and distinct ones distinct.
    """
    if type(value) is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else _wrap_int64(value)
    if isinstance(value, str):
        try:
            return as_int(int(value))
        except ValueError:
            return MISSING
    if isinstance(value, float) and value.is_integer():
        return as_int(int(value))
    return MISSING


def _wrap_int64(value: int) -> int:
    return (value - _INT64_MIN) % (1 << 64) + _INT64_MIN


def _as_ints(values: list[Any]) -> list[int]:
    """`as_int` of each value (the values themselves when all are ints)."""
    if all(map(is_, map(type, values), repeat(int))):
        return values
    return list(map(as_int, values))


def _as_float(value: Any) -> float:
    if type(value) is int or type(value) is float:
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return float("nan")
    return float("nan")


def _array(values: list[Any], empty: type) -> Array | None:
    """`values` as one numpy array, None when they do not make one (lists, huge ints...)."""
    if not values:
        return np.zeros(0, dtype=empty)
    try:
        return np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return None


def _ints(values: list[Any]) -> Array:
    """int64 column; absent values are already MISSING."""
    arr = _array(values, np.int64)
    if arr is not None and arr.dtype.kind == "i" and arr.ndim == 1:
        return arr.astype(np.int64, copy=False)
    return np.fromiter(map(as_int, values), dtype=np.int64, count=len(values))


def _floats(values: list[Any]) -> Array:
    arr = _array(values, np.float64)
    if arr is not None and arr.dtype.kind in "fi" and arr.ndim == 1:
        return arr.astype(np.float64, copy=False)
    return np.fromiter(map(_as_float, values), dtype=np.float64, count=len(values))


def _table_codes(
    strings: list[str], local: Array, table: dict[str, int], intern: Callable[..., Array]
) -> Array:
    """Codes into `table` of scanned string indices (-1: absent), interned in first-seen order."""
    if _first_seen is not None:
        in_order = _first_seen(np.ascontiguousarray(local, dtype=np.int32).data, len(strings))
    else:
        seen, first = np.unique(local, return_index=True)
        in_order = seen[np.argsort(first, kind="stable")].tolist()
    codes = np.full(len(strings) + 1, -1, dtype=np.int32)  # the last entry serves index -1
    values = [strings[i] if i >= 0 else None for i in in_order]
    codes[in_order] = intern(values, table)
    return codes[local]


def _int_column(rows: list[Any], key: str) -> Array:
    """int64 column of `key` (absent: MISSING)."""
    if rows and type(rows[0]) in _TYPED_ROWS:
        try:
            return np.fromiter(map(_GETTERS[type(rows[0]), key], rows), np.int64, len(rows))
        except OverflowError:  # an id beyond int64: the per-value path decides
            pass
    return _ints(_field(rows, key, MISSING))


def _float_column(rows: list[Any], key: str) -> Array:
    """float64 column of `key` (absent: NaN)."""
    if rows and type(rows[0]) in _TYPED_ROWS:
        return np.fromiter(map(_GETTERS[type(rows[0]), key], rows), np.float64, len(rows))
    return _floats(_field(rows, key, np.nan))


def _int_times(rows: list[Any], key: str) -> Array | None:
    """Exact ns of a time field that is an integer (µs) in every row, else None."""
    if not rows or type(rows[0]) not in _INT_TIME_ROWS:
        return None
    try:
        us = np.fromiter(map(_GETTERS[type(rows[0]), key], rows), np.int64, len(rows))
    except (TypeError, OverflowError):  # an absent value, or one beyond int64
        return None
    if len(us) and int(np.abs(us).max()) >= _MAX_INT_US:
        return None
    return us * _NS_PER_US


def _field(rows: list[Any], key: str, default: Any = None) -> list[Any]:
    """`key` of every row: dicts (orjson) or structs of one type (msgspec, schema.py)."""
    if rows:
        getter = _GETTERS.get((type(rows[0]), key))
        if getter is not None:
            return list(map(getter, rows))
    return list(map(_get, rows, repeat(key), repeat(default)))


class ColumnBuilder:
    """Accumulates the columns of one trace, chunk by chunk."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.names: dict[str, int] = {}
        self.categories: dict[str, int] = {}
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.count = 0
        self._events = _Columns(record_fields(EventTable))
        self._flows = _Columns(record_fields(FlowTable))

    @property
    def events(self) -> int:
        """Timed events added so far (flows and metadata not counted): what `limits.max_events`
        bounds, since they are what the analyses' memory grows with."""
        return self._events.size

    # -- one chunk ---------------------------------------------------------------------------

    def add(self, events: list[Any] | Scanned, text: Text, reparse: Reparse | None = None) -> None:
        """Add one parsed slice of `traceEvents`.

        `events`: the C scanner's columns (`Scanned`), or parsed events. `text` is the JSON the
        slice was parsed from (its time numbers are read again when floats are too coarse);
        `reparse` parses it again with times rewritten to integer ns (default: `text` is the
        slice's elements without the brackets).
        """
        if type(events) is tuple:
            self._add_scanned(events)
            return
        assert isinstance(events, list)
        base = self.count
        n = len(events)
        codes = self._phases(events)
        meta = codes == _META
        if meta.any():
            self._metadata(list(compress(events, meta.tolist())))
            kept = ~meta
            rows = list(compress(events, kept.tolist()))
            position = np.flatnonzero(kept) + base
            codes = codes[kept]
        else:
            kept, rows, position = None, events, np.arange(base, base + n)
        timed = codes < _META
        flow = ~timed
        timed_rows = list(compress(rows, timed.tolist()))
        flow_rows = list(compress(rows, flow.tolist())) if flow.any() else []
        if rows and type(rows[0]) in _KNOWN_ROWS:
            cat = self._known_categories(rows)
        else:
            cat = self._intern(_field(rows, "cat"), self.categories)
        dur = _field(timed_rows, "dur")
        has_dur = np.fromiter(map(is_not, dur, repeat(None)), np.bool_, count=len(dur))
        ts_ns = _int_times(rows, "ts")
        if ts_ns is None:
            ts_ns = _times(_field(rows, "ts", _ABSENT), "ts", None)
        if ts_ns is None:  # the text holds every event's `ts`, metadata rows' too
            every = _times(_field(events, "ts", _ABSENT), "ts", text)
            ts_ns = every if every is None or kept is None else every[kept]
        dur_ns = _int_times(timed_rows, "dur") if has_dur.all() else None
        if dur_ns is None:
            dur_ns = _times(dur, "dur", text, has_dur)
        del dur
        if ts_ns is None or dur_ns is None:
            again = reparse() if reparse else _reparse(text, self.source)
            ts_ns, dur_ns = self._reparsed_times(again, n, kept)
            dur_ns = dur_ns[timed]
        row_type = type(timed_rows[0]) if timed_rows else None
        if row_type in _NO_ARGS:
            args = _field(timed_rows, "args")
            if any(map(is_, args, repeat(None))):
                no_args = _NO_ARGS[row_type]
                args = [no_args if a is None else a for a in args]
        else:
            args = [a if type(a) is dict else _EMPTY for a in _field(timed_rows, "args")]
        self._events.append(
            {
                "index": position[timed],
                "ts_ns": ts_ns[timed],
                "dur_ns": dur_ns,
                "has_dur": has_dur,
                "phase": codes[timed],
                "category": cat[timed],
                "name": self._intern(_field(timed_rows, "name"), self.names),
                "pid": _int_column(timed_rows, "pid"),
                "tid": _int_column(timed_rows, "tid"),
                "stream": _int_column(args, "stream"),
                "correlation": _int_column(args, "correlation"),
                "external_id": _int_column(args, "External id"),
                "occupancy": _float_column(args, OCCUPANCY_ARG),
            }
        )
        self._flows.append(
            {
                "index": position[flow],
                "ts_ns": ts_ns[flow],
                "phase": codes[flow] - (_META + 1),
                "category": cat[flow],
                "flow_id": _int_column(flow_rows, "id"),
                "pid": _int_column(flow_rows, "pid"),
                "tid": _int_column(flow_rows, "tid"),
            }
        )
        self.count += n

    def _add_scanned(self, scanned: Scanned) -> None:
        """Add a slice the C scanner read (`_scan.c`): the same columns as `add` gives."""
        n, strings = scanned[0], scanned[1]
        ph, cat, name, arg_name = (np.frombuffer(b, np.int32) for b in scanned[2:6])
        ts, dur, pid, tid, flow_id, stream, correlation, external = (
            np.frombuffer(b, np.int64) for b in scanned[6:14]
        )
        occupancy = np.frombuffer(scanned[14], np.float64)
        has_dur = np.frombuffer(scanned[16], np.bool_)
        base = self.count
        # index -1 (absent) reads the last entry of each per-string table
        string_phase = [_PHASE_CODE.get(text, _OTHER) for text in strings]
        codes = np.asarray([*string_phase, _OTHER], dtype=np.int32)[ph]
        meta = np.flatnonzero(codes == _META)
        if len(meta):
            self._scanned_metadata(strings, name[meta], arg_name[meta], pid[meta], tid[meta])
        kept = np.flatnonzero(codes != _META)
        cat_code = _table_codes(strings, cat[kept], self.categories, self._intern)
        timed = kept[codes[kept] < _META]
        flow = kept[codes[kept] > _META]
        is_timed = codes[kept] < _META
        self._events.append(
            {
                "index": timed + base,
                "ts_ns": ts,
                "dur_ns": dur,
                "has_dur": has_dur,
                "phase": codes[timed],
                "category": cat_code[is_timed],
                "name": _table_codes(strings, name[timed], self.names, self._intern),
                "pid": pid,
                "tid": tid,
                "stream": stream,
                "correlation": correlation,
                "external_id": external,
                "occupancy": occupancy,
            },
            rows=timed,
        )
        self._flows.append(
            {
                "index": flow + base,
                "ts_ns": ts,
                "phase": codes[flow] - (_META + 1),
                "category": cat_code[~is_timed],
                "flow_id": flow_id,
                "pid": pid,
                "tid": tid,
            },
            rows=flow,
        )
        self.count += n

    def _scanned_metadata(
        self, strings: list[str], kinds: Array, labels: Array, pids: Array, tids: Array
    ) -> None:
        """`_metadata` for scanned rows: string names only (-1: absent), later ones win."""
        for kind in ("process_name", "thread_name"):
            wanted = [i for i, text in enumerate(strings) if text == kind]
            rows = np.flatnonzero(np.isin(kinds, wanted) & (labels >= 0))
            named = [strings[i] for i in labels[rows].tolist()]
            if kind == "process_name":
                self.process_names.update(zip(pids[rows].tolist(), named, strict=True))
            else:
                keys = zip(pids[rows].tolist(), tids[rows].tolist(), strict=True)
                self.thread_names.update(zip(keys, named, strict=True))

    def _phases(self, events: list[Any]) -> Array:
        """Code per event: index into PHASES, `_META` for "M", above it the flow phases."""
        if events and type(events[0]) in _KNOWN_ROWS:
            shared = map(_GETTERS[type(events[0]), "ph"], events)
            return np.fromiter(map(_KNOWN_PHASE_CODE.__getitem__, shared), np.int32, len(events))
        try:
            ph = _field(events, "ph")
        except TypeError:
            bad = next(i for i, e in enumerate(events) if type(e) is not dict)
            raise TraceFormatError(
                f"{self.source}: traceEvents[{self.count + bad}] is not an object: "
                f"{events[bad]!r:.80}"
            ) from None
        try:
            return np.fromiter(map(_PHASE_CODE.get, ph, repeat(_OTHER)), np.int32, len(ph))
        except TypeError:  # an unhashable `ph`
            known = (_PHASE_CODE.get(p, _OTHER) if isinstance(p, str) else _OTHER for p in ph)
            return np.fromiter(known, np.int32, len(ph))

    def _reparsed_times(self, again: list[Any], n: int, kept: Array | None) -> tuple[Array, Array]:
        """`ts` / `dur` (integer ns) of the `n` events parsed again after `rewrite_times`."""
        if len(again) != n:
            raise TraceFormatError(f"{self.source}: the events changed on a second parse")
        if kept is not None:
            again = list(compress(again, kept.tolist()))
        ts = _field(again, "ts", 0)
        dur = [0 if d is None else d for d in _field(again, "dur")]
        ts_ns, dur_ns = ints_as_ns(ts), ints_as_ns(dur)
        for key, values, ns in (("ts", ts, ts_ns), ("dur", dur, dur_ns)):
            if ns is None:
                bad = next((v for v in values if type(v) is not int), None)
                if type(bad) is float:  # rewritten to ns, but beyond int64
                    raise TraceFormatError(
                        f"{self.source}: the `{key}` of an event is out of range ({bad / 1000:g} "
                        "µs): times must fit in 64-bit integer nanoseconds (±292 years)"
                    )
                raise TraceFormatError(
                    f"{self.source}: the `{key}` of an event is {bad!r:.40}, not a number of "
                    "µs; every `ts` and `dur` is a number"
                )
        assert ts_ns is not None and dur_ns is not None
        return ts_ns, dur_ns

    # -- strings and metadata ----------------------------------------------------------------

    @staticmethod
    def _intern(values: list[Any], table: dict[str, int]) -> Array:
        """Codes into `table` (first-seen order), -1 for None; non-strings interned as `str`."""
        try:
            distinct = dict.fromkeys(values)
        except TypeError:  # an unhashable value
            values = [v if v is None or type(v) is str else str(v) for v in values]
            distinct = dict.fromkeys(values)
        lookup: dict[Any, int] = {}
        for v in distinct:
            if v is None:
                lookup[v] = -1
            else:
                key = v if type(v) is str else str(v)
                code = table.get(key)
                if code is None:
                    code = table[key] = len(table)
                lookup[v] = code
        return np.fromiter(map(lookup.__getitem__, values), np.int32, count=len(values))

    def _known_categories(self, rows: list[Any]) -> Array:
        """Category codes of rows whose `cat` is a known string (or None), in one pass."""
        cat = map(_GETTERS[type(rows[0]), "cat"], rows)
        known = np.fromiter(map(_KNOWN_CATEGORY_INDEX.__getitem__, cat), np.int32, len(rows))
        seen, first = np.unique(known, return_index=True)
        in_order = seen[np.argsort(first)].tolist()  # first-seen order, as `_intern` keeps
        codes = np.full(len(_KNOWN_CATEGORY_NAMES), -1, dtype=np.int32)
        labels = [_KNOWN_CATEGORY_NAMES[i] for i in in_order]
        codes[in_order] = self._intern(labels, self.categories)
        return codes[known]

    def _metadata(self, rows: list[Any]) -> None:
        """Process and thread names from `ph: "M"` events (later ones win, as in viewers)."""
        kinds = _field(rows, "name")
        for kind, names in (("process_name", self.process_names), ("thread_name", None)):
            chosen = list(compress(rows, map(eq, kinds, repeat(kind))))
            args = _field(chosen, "args")
            found: list[Any]
            if args and type(args[0]) in _ARGS_TYPES and not any(map(is_, args, repeat(None))):
                found = _field(args, "name")
            else:
                found = [
                    a.get("name") if type(a) is dict else a.name if type(a) in _ARGS_TYPES else None
                    for a in args
                ]
            named = list(map(is_, map(type, found), repeat(str)))
            labels: list[str] = list(compress(found, named))
            if len(labels) < len(found):
                chosen = list(compress(chosen, named))
            pids = _as_ints(_field(chosen, "pid"))
            if names is not None:
                names.update(zip(pids, labels, strict=True))
            else:
                tids = _as_ints(_field(chosen, "tid"))
                self.thread_names.update(zip(zip(pids, tids, strict=True), labels, strict=True))

    # -- the result --------------------------------------------------------------------------

    def tables(self) -> tuple[EventTable, FlowTable]:
        if not self._events.columns:
            self.add([], b"")
        ev = EventTable(**self._events.result())
        fl = FlowTable(**self._flows.result())
        return ev, fl


class _Columns:
    """Columns kept in one buffer each, grown in place (`ndarray.resize`: realloc, which moves a
    large buffer's pages with mremap instead of copying them) by half again when full, and cut to
    size at the end. Chunks are copied in, so no per-chunk object outlives its chunk (small
    long-lived objects made between two chunks' parsed objects would pin the allocator's arenas);
    each row is written once, straight from the chunk's arrays (`take` for selected rows), and
    the result is the buffers themselves: no join, no second copy.
    """

    MIN_ROWS = 1 << 12

    def __init__(self, keys: Any) -> None:
        self.keys = list(keys)
        self.columns: dict[str, Array] = {}
        self.size = 0  # rows written

    def append(self, part: dict[str, Array], rows: Array | None = None) -> None:
        """Add `part`'s columns: each either already the chunk's rows, or (with `rows`) a whole
        chunk column of which the rows at `rows` are taken (same length as the others)."""
        n = len(rows) if rows is not None else len(part[self.keys[0]])
        start = self.size
        if not self.columns:
            cap = max(self.MIN_ROWS, n)
            self.columns = {k: np.empty(cap, dtype=part[k].dtype) for k in self.keys}
        elif start + n > len(self.columns[self.keys[0]]):
            cap = max(start + n, len(self.columns[self.keys[0]]) * 3 // 2)
            for column in self.columns.values():
                column.resize(cap, refcheck=False)  # no view of a buffer is ever kept
        for k in self.keys:
            out = self.columns[k][start : start + n]
            value = part[k]
            if rows is not None and len(value) != n:
                np.take(value, rows, out=out)
            else:
                out[...] = value
        self.size = start + n

    def result(self) -> dict[str, Array]:
        out = {}
        for k in self.keys:
            column = self.columns.pop(k)
            column.resize(self.size, refcheck=False)
            out[k] = column
        return out


def _times(
    values: list[Any], key: str, text: Text | None, present: Array | None = None
) -> Array | None:
    """Exact ns of one time field (absent: 0), or None when only a re-parse can tell.

    Without `text`, only what the parsed numbers prove; with it, `values` must be every `key`
    of the text, in document order.
    """
    if present is None:
        present = np.fromiter(map(is_not, values, repeat(_ABSENT)), np.bool_, len(values))
    if not present.all():
        values = [v if p else 0 for v, p in zip(values, present.tolist(), strict=True)]
    ns = to_ns(values)
    if ns is not None or text is None:
        return ns
    # Coarse floats: the same numbers read from the text, when they are provably the same ones.
    numbers = numbers_in_text(text, key)
    given = list(compress(values, present.tolist()))
    if len(numbers) != len(given):
        return None
    try:
        if list(map(float, numbers)) != given:  # Python reads each text as the parser did
            return None
        out = np.zeros(len(values), dtype=np.int64)
        out[present] = texts_to_ns(numbers)
    except (TypeError, ValueError, OverflowError):  # beyond int64 ns: the re-parse says so
        return None
    return out


def _reparse(text: Text, source: str) -> list[Any]:
    import orjson  # the rare path: not imported for the common one

    try:
        parsed = orjson.loads(b"[" + rewrite_times(bytes(text)) + b"]")
    except orjson.JSONDecodeError as exc:  # a time rewritten to an integer beyond 64 bits
        raise TraceFormatError(
            f"{source}: a `ts` or `dur` is out of range ({exc}): times are µs that fit in "
            "64-bit integer nanoseconds (±292 years)"
        ) from None
    return parsed if isinstance(parsed, list) else []
