"""The C slice scanner (`_scan.c`): what it reads, what it leaves to Python, and that loading
through it gives exactly what the msgspec and orjson paths give."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.analyze.traces import load as load_module
from gpulens.analyze.traces.model import Trace
from gpulens.app.traces import load_trace_file

if not load_module.SCANNER and not os.environ.get("CI"):  # in CI: fail, never skip
    pytest.skip("the C scanner is not built (no C compiler at install)", allow_module_level=True)

from gpulens.analyze.traces._scan import scan

Same = Callable[[Trace, Trace], None]  # the `same_trace` fixture (tests/conftest.py)
COLUMNS = (
    ("ph", np.int32),
    ("cat", np.int32),
    ("name", np.int32),
    ("arg_name", np.int32),
    ("ts", np.int64),
    ("dur", np.int64),
    ("pid", np.int64),
    ("tid", np.int64),
    ("id", np.int64),
    ("stream", np.int64),
    ("correlation", np.int64),
    ("external_id", np.int64),
    ("occupancy", np.float64),
    ("has_ts", np.bool_),
    ("has_dur", np.bool_),
)


def _scan(text: str | bytes) -> dict[str, Any] | None:
    raw = text.encode() if isinstance(text, str) else text
    result = scan(raw, 0, len(raw))
    if result is None:
        return None
    count, strings, *columns = result
    out: dict[str, Any] = {"count": count, "strings": strings}
    for (key, dtype), data in zip(COLUMNS, columns, strict=True):
        values = np.frombuffer(data, dtype).tolist()
        if key in ("ph", "cat", "name", "arg_name"):
            values = [strings[i] if i >= 0 else None for i in values]
        out[key] = values
    return out


def test_reads_the_fields_exactly() -> None:
    text = (
        '{"ph": "X", "cat": "kernel", "name": "sm90_xmma \\"gemm\\" \\u00e9\\ud83d\\ude00", '
        '"pid": 12, "tid": -7, "ts": 1712195495519689.047, "dur": 0.5, "unknown": '
        '[[1, 2.5e3, -0.0], {"a": null, "b": [true, false, "x\\\\y"]}], "args": {"stream": 7, '
        '"correlation": 123456789012345678, "External id": 9, "est. achieved occupancy %": 50, '
        '"grid": [1, 1, 1]}},\n {"ph": "M", "name": "thread_name", "pid": 3, "tid": 4, '
        '"args": {"name": "stream 7"}}, {"ph": "f", "id": 5, "ts": 12, "args": {}}'
    )
    got = _scan(text)
    assert got is not None
    assert got["count"] == 3
    assert got["name"] == ['sm90_xmma "gemm" é\U0001f600', "thread_name", None]
    assert got["ts"] == [1712195495519689047, 0, 12000]
    assert got["has_ts"] == [True, False, True]
    assert got["dur"] == [500, 0, 0]
    assert got["has_dur"] == [True, False, False]
    assert got["pid"] == [12, 3, -1]
    assert got["tid"] == [-7, 4, -1]
    assert got["id"] == [-1, -1, 5]
    assert got["stream"] == [7, -1, -1]
    assert got["correlation"] == [123456789012345678, -1, -1]
    assert got["external_id"] == [9, -1, -1]
    assert got["occupancy"][0] == 50.0 and np.isnan(got["occupancy"][1:]).all()
    assert got["arg_name"] == [None, "stream 7", None]
    assert got["ph"] == ["X", "M", "f"]
    assert got["cat"] == ["kernel", None, None]


def test_repeated_keys_keep_the_last_as_a_dict_does() -> None:
    got = _scan('{"ts": 1, "ts": 2, "args": {"stream": 1}, "args": {"correlation": 3}}')
    assert got is not None
    assert got["ts"] == [2000]
    assert (got["stream"], got["correlation"]) == ([-1], [3])


@pytest.mark.parametrize(
    "text",
    [
        '{"pid": "Spans"}',  # a string where an int is usual
        '{"id": 1.0}',
        '{"ts": null}',
        '{"ts": 1.0005}',  # more than 3 decimals: rounding is Python's
        '{"ts": 1e3}',
        '{"pid": 12345678901234567890}',  # beyond int64
        '{"ts": 9999999999999999}',  # ns beyond int64
        '{"args": null}',
        '{"args": {"name": 5}}',
        '{"n\\u0061me": "x"}',  # a key with escapes
        '{"ts": 01}',  # not JSON from here on
        '{"ts": 1,}',
        '{"ts": 1} {"ts": 2}',
        '{"ts": 1}, ',
        '{"name": "a\tb"}',
        '{"x": tru}',
        '{"x": [1, 2}',
        '{"x": "\\q"}',
        '{"ts": 1',
        "[1]",
        "5",
        '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}",  # nesting beyond its bound, no crash
    ],
)
def test_leaves_anything_else_to_python(text: str) -> None:
    assert _scan(text) is None


@pytest.mark.parametrize("length", range(0, 26))
def test_strings_of_every_length_and_every_special_position(length: int) -> None:
    """The scanner skips plain string bytes eight at a time: a quote, backslash or control byte
    at any position of any short length is still found where it is, as json reads it."""
    texts = ["a" * length]
    for at in range(length):
        plain = list("b" * length)
        texts.append("".join(plain[:at]) + '\\"' + "".join(plain[at + 1 :]))  # escaped quote
        texts.append("".join(plain[:at]) + "\\u00e9" + "".join(plain[at + 1 :]))
        texts.append("".join(plain[:at]) + "é" + "".join(plain[at + 1 :]))  # UTF-8, high bytes
    for body in texts:
        text = '{"name": "' + body + '", "cat": "' + "z" + body + '"}'
        got = _scan(text)
        assert got is not None, text
        want = json.loads(text)
        assert (got["name"], got["cat"]) == ([want["name"]], [want["cat"]]), text
    for at in range(length):  # a raw control byte is not JSON: left to Python wherever it is
        body = "c" * at + "\t" + "c" * (length - at - 1)
        assert _scan('{"name": "' + body + '"}') is None


def test_names_sharing_long_prefixes_and_suffixes_stay_distinct() -> None:
    """Interning hashes up to 48 bytes from each end: names that differ only in the middle, or
    in one byte of a word, are still told apart (and equal names are one string)."""
    prefix, suffix = "void at::native::elementwise_kernel<128, 4, " * 2, ">(int, Func)" * 5
    names = [prefix + middle + suffix for middle in ("a", "b", "ab", "ba", "")]
    names += ["k" * n for n in range(1, 60)]
    events = [{"ph": "X", "name": name, "ts": i} for i, name in enumerate(names * 2)]
    got = _scan(json.dumps(events)[1:-1])
    assert got is not None
    assert got["name"] == names * 2
    assert len(got["strings"]) == len(set(names)) + 1  # and "X"


def test_empty_and_whitespace() -> None:
    assert _scan(" \n\t")["count"] == 0  # type: ignore[index]
    assert _scan("{} , {}")["count"] == 2  # type: ignore[index]


def _load(path: Path, chunk: int) -> Trace | type[Exception]:
    try:
        return load_trace_file(path, chunk_bytes=chunk)
    except Exception as exc:  # the same rejection is expected from every path
        return type(exc)


def _three_ways(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch, same: Same) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    scanned = _load(path, chunk)
    monkeypatch.setattr(load_module, "_USE_SCANNER", False)
    structs = _load(path, chunk)
    monkeypatch.setattr(load_module, "_USE_STRUCTS", False)
    dicts = _load(path, chunk)
    monkeypatch.setattr(load_module, "_USE_STRUCTS", True)
    monkeypatch.setattr(load_module, "_USE_SCANNER", True)
    for other in (structs, dicts):
        if isinstance(scanned, Trace) and isinstance(other, Trace):
            same(scanned, other)
        else:
            assert scanned == other


_names = st.sampled_from(["k", "aten::mm", 'a "q"', "é\U0001f600", "x\\y", "process_name"])
_numbers = st.one_of(
    st.integers(-(10**6), 10**16),
    st.decimals(-(10**6), 10**12, places=3).map(lambda d: float(d)),
    st.sampled_from([0, -0.0, 1e3, 2.5e-4, 1712195495519689.047, 18446744073709551615]),
)
_values = st.one_of(_numbers, _names, st.none(), st.booleans(), st.lists(_numbers, max_size=3))
_events = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.one_of(st.sampled_from(["X", "i", "M", "s", "f", "t", "C", "B"]), _values),
        "cat": st.one_of(st.sampled_from(["kernel", "cpu_op", "ac2g", "new_kind"]), _values),
        "name": st.one_of(_names, _values),
        "ts": _values,
        "dur": _values,
        "pid": _values,
        "tid": _values,
        "id": _values,
        "extra": _values,
        "args": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "name": _values,
                    "stream": _values,
                    "correlation": _values,
                    "External id": _values,
                    "est. achieved occupancy %": _values,
                    "Input Dims": st.lists(st.lists(_numbers, max_size=3), max_size=3),
                },
            ),
        ),
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(_events, min_size=1, max_size=30), chunk=st.sampled_from([1, 200, 1 << 19]))
def test_loading_through_the_scanner_equals_the_python_paths(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    same_trace: Same,
    events: list[dict[str, Any]],
    chunk: int,
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    _three_ways(path, chunk, monkeypatch, same_trace)


_valid_slice = (
    '{"ph": "X", "cat": "kernel", "name": "k\\"1", "pid": 1, "tid": 2, "ts": 10.5, "dur": 3, '
    '"args": {"stream": 7, "correlation": 8, "x": [1, {"y": null}]}}, {"ph": "f", "id": 8, '
    '"ts": 11, "cat": "ac2g"}'
)


@settings(max_examples=400, deadline=None)
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, len(_valid_slice) - 1),
            st.sampled_from([*'{}[]",:\\ 0159.-eEtrufalsn', "", "\x01"]),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_damaged_slice_is_read_only_if_it_is_still_json(edits: list[tuple[int, str]]) -> None:
    text = _valid_slice
    for at, char in edits:
        text = text[:at] + char + text[at + 1 :]
    got = _scan(text)  # must not crash, whatever the text
    if got is not None:
        parsed = orjson.loads("[" + text + "]")
        assert len(parsed) == got["count"]
