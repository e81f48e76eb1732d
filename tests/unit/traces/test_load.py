"""The Kineto loader: exact ns parsing, chunking, rank detection, each format error, and its
sources (a file through the app, bytes, a stream that cannot seek)."""

from __future__ import annotations

import gzip
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analyze.traces import load as load_module
from gpulens.analyze.traces.breakdown import breakdown, union_length
from gpulens.analyze.traces.load import decimal_to_ns, load_trace, rank_from_name
from gpulens.analyze.traces.record import record_fields
from gpulens.analyze.traces.times import texts_to_ns
from gpulens.app.traces import load_trace_file
from gpulens.errors import TraceFormatError


def _event(ts: str, dur: str, name: str = "k", **extra: object) -> str:
    args = json.dumps(extra.pop("args", {}))
    fields = "".join(f', "{k}": {json.dumps(v)}' for k, v in extra.items())
    head = f'{{"ph": "X", "cat": "kernel", "name": {json.dumps(name)}, "pid": 0, "tid": 7'
    return f'{head}, "ts": {ts}, "dur": {dur}, "args": {args}{fields}}}'


def _write(tmp_path: Path, text: str, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


class _Pipe:
    """A stream with only `read(n)` (no seek), giving at most `most` bytes a read."""

    def __init__(self, data: bytes, most: int = 1 << 30) -> None:
        self.data, self.most, self.pos = data, most, 0
        self.sizes: list[int] = []

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + min(n, self.most)]
        self.pos += len(out)
        self.sizes.append(len(out))
        return out


def _us_text(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    return f"{sign}{abs(ns) // 1000}.{abs(ns) % 1000:03d}"


@given(st.integers(min_value=-(10**18), max_value=10**18))
def test_decimal_to_ns_is_exact(ns: int) -> None:
    assert decimal_to_ns(_us_text(ns)) == ns
    assert decimal_to_ns(_us_text(ns).encode()) == ns


def test_decimal_to_ns_forms() -> None:
    assert decimal_to_ns("12") == 12_000
    assert decimal_to_ns("0.047") == 47
    assert decimal_to_ns("1.5e3") == 1_500_000
    assert decimal_to_ns("1.0005") == 1000  # sub-ns rounds half to even
    with pytest.raises(ValueError):
        decimal_to_ns("abc")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=2 * 10**18), min_size=1, max_size=30),
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=30, max_size=30),
    st.sampled_from([16, 1 << 20]),
)
def test_loaded_times_are_exact_ns(
    tmp_path_factory: pytest.TempPathFactory, starts: list[int], durs: list[int], chunk: int
) -> None:
    events = ",\n".join(
        _event(_us_text(s), _us_text(d)) for s, d in zip(starts, durs, strict=False)
    )
    path = _write(tmp_path_factory.mktemp("t"), '{"traceEvents": [' + events + "]}")
    trace = load_trace_file(path, chunk_bytes=chunk)
    assert trace.events.ts_ns.tolist() == starts
    assert trace.events.dur_ns.tolist() == durs[: len(starts)]


def test_integer_and_relative_float_times(tmp_path: Path) -> None:
    text = "[" + _event("5", "2") + "," + _event("4458676522873.933", "97.762") + "]"
    trace = load_trace_file(_write(tmp_path, text))
    assert trace.events.ts_ns.tolist() == [5000, 4458676522873933]
    assert trace.events.dur_ns.tolist() == [2000, 97762]
    assert int(Decimal("4458676522873.933") * 1000) == trace.events.ts_ns[1]


def test_bare_array_gzip_and_columns(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 9,
            "tid": 9,
            "ts": 1,
            "dur": 2,
            "args": {"correlation": 5, "External id": 3},
        },
        {"ph": "s", "cat": "ac2g", "id": 5, "pid": 9, "tid": 9, "ts": 1, "name": "ac2g"},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 4,
            "args": {"stream": "7", "correlation": 5},
        },
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 9, "tid": 9, "ts": 3},
    ]
    path = tmp_path / "legacy.json.gz"
    path.write_bytes(gzip.compress(json.dumps(events).encode()))
    trace = load_trace_file(path, rank=4)
    assert (trace.rank, trace.rank_source) == (4, "argument")
    assert len(trace.events) == 3 and len(trace.flows) == 1
    assert trace.events.stream.tolist() == [-1, 7, -1]
    assert trace.events.correlation.tolist() == [5, 5, -1]
    assert trace.events.has_dur.tolist() == [True, True, False]
    assert trace.flows.flow_id.tolist() == [5]
    assert trace.process_names == {0: "GPU 0"}
    assert [trace.names[i] for i in trace.events.name] == ["cudaLaunchKernel", "k", "[memory]"]


def test_metadata_after_events_and_chunks(tmp_path: Path) -> None:
    events = ", ".join(_event(str(i), "1") for i in range(100))
    text = (
        '{"deviceProperties": [{"id": 0, "name": "H100"}], "traceEvents": [' + events + "],"
        ' "distributedInfo": {"rank": 3, "world_size": 8}}'
    )
    path = _write(tmp_path, text, "job_rank_5.json")
    for chunk in (1, 50, 1 << 20):
        trace = load_trace_file(path, chunk_bytes=chunk)
        assert (trace.rank, trace.rank_source, trace.world_size) == (3, "distributedInfo", 8)
        assert trace.device_properties[0]["name"] == "H100"
        assert trace.events.ts_ns.tolist() == [i * 1000 for i in range(100)]
        assert trace.events.index.tolist() == list(range(100))


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank_3.json", 3),
        ("rank-0.Apr_03.pt.trace.json.gz", 0),
        ("trainer_rank12.json", 12),
        ("job_r3.json.gz", 3),
        ("job_r1of2.json", 1),
        ("resnet_kineto.json.gz", None),
        ("trace.json", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_rank_from_file_name_before_argument(tmp_path: Path) -> None:
    trace = load_trace_file(_write(tmp_path, '{"traceEvents": []}', "x_rank7.json"), rank=2)
    assert (trace.rank, trace.rank_source) == (7, "file name")
    assert len(trace.events) == 0
    assert breakdown(trace).temporal is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"not json at all", "not valid JSON"),
        (b'{"schemaVersion": 1}', "no `traceEvents`"),
        (b'{"traceEvents": {"a": 1}}', "not a list"),
        (b'"just a string"', "JSON root is a str"),
        (b'{"traceEvents": [1, 2]}', "is not an object"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}', "not valid JSON"),
    ],
)
def test_format_errors_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message) as info:
        load_trace_file(path)
    assert str(path) in str(info.value)
    # the same error from bytes, a pipe (one byte a read) and gzip through a pipe
    for source in (content, _Pipe(content, 1), _Pipe(gzip.compress(content), 7)):
        with pytest.raises(TraceFormatError, match=message) as info:
            load_trace(source, name="up/bad.json")
        assert str(info.value).startswith("up/bad.json: ")


def test_a_pipe_still_gives_the_exact_error_where_it_can(tmp_path: Path) -> None:
    # the text that went by cannot be read again from a pipe: the streaming parser's reason;
    # a seekable stream is read again from where it stood, for orjson's exact position
    events = ", ".join(_event(str(i), "1") for i in range(50))
    cut = ('{"traceEvents": [' + events).encode()
    with pytest.raises(TraceFormatError, match=r"not a trace \(the events array does not end"):
        load_trace(_Pipe(cut), name="t.json", chunk_bytes=100)
    stream = io.BytesIO(b"junk" + cut)
    stream.seek(4)
    with pytest.raises(TraceFormatError, match=r"not valid JSON \(unexpected end") as info:
        load_trace(stream, name="t.json", chunk_bytes=100)
    assert "junk" not in str(info.value)
    # nothing dropped yet (not an object, no events before the bad text): the exact error from
    # a pipe too
    with pytest.raises(TraceFormatError, match=r"not valid JSON \(trailing comma.*column 27"):
        load_trace(_Pipe(b'{"traceEvents": [], "x": 1,}', 2), name="t.json")
    with pytest.raises(TraceFormatError, match=r"not valid JSON \(invalid literal.*column 3"):
        load_trace(_Pipe(b"  nope " * 50_000, 3), name="t.json")


def test_a_path_is_not_a_source(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"traceEvents": []}')
    for wrong in (path, str(path)):
        with pytest.raises(TypeError, match="open the file first"):
            load_trace(wrong, name="t.json")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not int"):
        load_trace(3, name="t.json")  # type: ignore[arg-type]
    with pytest.raises(TraceFormatError, match="cannot read the trace file"):
        load_trace_file(tmp_path)  # a directory


def test_truncated_and_corrupt_gzip(tmp_path: Path) -> None:
    data = gzip.compress(b'{"traceEvents": []}' * 100)
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        load_trace_file(path)
    path.write_bytes(data[:10] + b"\x00" * 20 + data[30:])
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace_file(path)
    with pytest.raises(TraceFormatError, match="cannot read"):
        load_trace_file(tmp_path / "missing.json")


def test_string_times_are_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"traceEvents": [{"ph": "X", "ts": "1", "dur": 1}]}')
    with pytest.raises(TraceFormatError, match="not a number"):
        load_trace_file(path)


def test_union_length() -> None:
    s = np.array([0, 5, 10, 30], dtype=np.int64)
    e = np.array([10, 8, 20, 31], dtype=np.int64)
    assert union_length(s, e) == 21


@given(st.lists(st.integers(min_value=-(10**18), max_value=9 * 10**18), max_size=40))
def test_texts_to_ns_matches_decimal_to_ns(values: list[int]) -> None:
    texts = [_us_text(v).encode() for v in values]
    texts += [b"12", b"0.5", b"-7.25", b"1e3", b"3.0005", b"5."]
    expected = [decimal_to_ns(t) for t in texts]
    assert texts_to_ns(texts).tolist() == expected


def test_cuts_only_between_events(tmp_path: Path) -> None:
    tricky = ['a}, {"b', "c}]d", 'e\\"}, {\\"f', "}"]
    events = [
        _event(str(i), "1", name=tricky[i % 4], args={"nested": [{"x": i}, {"y": [i]}]})
        for i in range(200)
    ]
    path = _write(tmp_path, '{"traceEvents": [' + ",\n".join(events) + '], "x": [{"y": 1}]}')
    whole = load_trace_file(path, chunk_bytes=None)
    assert [whole.names[i] for i in whole.events.name] == [tricky[i % 4] for i in range(200)]
    for chunk in (1, 100, 333, 4096):
        cut = load_trace_file(path, chunk_bytes=chunk)
        assert cut.names == whole.names and cut.metadata == whole.metadata == {"x": [{"y": 1}]}
        for key in ("index", "ts_ns", "name", "category"):
            assert getattr(cut.events, key).tolist() == getattr(whole.events, key).tolist()


def test_gzip_members_and_streaming_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [_event(f"{i}.5", "2", args={"pad": "x" * 200}) for i in range(3000)]
    text = ('{"traceEvents": [' + ", ".join(events) + "]}").encode()
    path = tmp_path / "t.json.gz"
    half = len(text) // 2
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    widest = [0]
    original = load_module._Text.more

    def more(self: Any, keep_from: int) -> int:
        shift = original(self, keep_from)
        widest[0] = max(widest[0], len(self.buf))
        return shift

    monkeypatch.setattr(load_module._Text, "more", more)
    trace = load_trace_file(path, chunk_bytes=16_384)
    assert trace.events.ts_ns.tolist() == [i * 1000 + 500 for i in range(3000)]
    assert len(text) > 700_000 and widest[0] < 5 * 65_536  # a window, never the whole text
    # from a stream that cannot seek: read in bounded blocks as the parse goes, the same window
    for data in (path.read_bytes(), text):
        widest[0] = 0
        pipe = _Pipe(data)
        same = load_trace(pipe, name=str(path), chunk_bytes=16_384)
        assert same.events.ts_ns.tolist() == trace.events.ts_ns.tolist()
        assert widest[0] < 5 * 65_536
        assert max(pipe.sizes) <= 1 << 18 and len(pipe.sizes) > len(data) // (1 << 18)


def test_coarse_floats_with_a_nested_ts_are_reparsed(tmp_path: Path) -> None:
    # a "ts" inside args breaks the pairing of text numbers with events: the slice is re-parsed
    events = [
        _event("1712195495519689.047", "0.5", args={"ts": 3}),
        _event("1712195495519690.001", "1.25"),
    ]
    path = _write(tmp_path, '{"traceEvents": [' + ", ".join(events) + "]}")
    for chunk in (None, 1 << 18):
        trace = load_trace_file(path, chunk_bytes=chunk)
        assert trace.events.ts_ns.tolist() == [1712195495519689047, 1712195495519690001]
        assert trace.events.dur_ns.tolist() == [500, 1250]


def test_struct_and_dict_decoding_agree_on_odd_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    # odd value types: structs keep them as parsed; slices that do not fit the structs (args not
    # an object) go through orjson; both paths give the same columns
    odd = [
        _event("1", "2", args={"stream": "7", "correlation": 3.0, "External id": None}),
        _event("2.5", "0.001", pid="Spans", tid=None, args={"est. achieved occupancy %": "12"}),
        '{"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "dev"}}',
        '{"ph": "M", "name": "thread_name", "pid": "3", "tid": 4.0, "args": {"name": 5}}',
        '{"ph": "i", "cat": null, "name": ["x"], "ts": 3, "s": "t", "args": null}',
        '{"ph": "s", "cat": "ac2g", "id": "9", "pid": 0, "tid": 7, "ts": 4}',
        '{"ph": "f", "cat": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 5, "bp": "e"}',
        '{"ph": ["X"], "ts": 6}',
        '{"ph": "X", "ts": 7, "dur": null, "args": {"stream": 1, "stream": 2}}',
        # fits the typed structs, but one id is beyond int64 and the occupancy is an int
        _event("9", "1", args={"correlation": 2**63 + 5, "est. achieved occupancy %": 50}),
    ]
    strange = '{"ph": "X", "name": "k", "ts": 8, "dur": 1, "args": "not an object"}'
    for events in (odd, [*odd, strange]):
        for doc in ("[" + ", ".join(events) + "]", '{"traceEvents": [' + ", ".join(events) + "]}"):
            path = _write(tmp_path, doc)
            for chunk in (1, 1 << 18):
                structs = load_trace_file(path, chunk_bytes=chunk)
                monkeypatch.setattr(load_module, "_USE_STRUCTS", False)
                dicts = load_trace_file(path, chunk_bytes=chunk)
                monkeypatch.setattr(load_module, "_USE_STRUCTS", True)
                whole = load_trace_file(path, chunk_bytes=None)
                for other in (dicts, whole):
                    for table in ("events", "flows"):
                        x, y = getattr(structs, table), getattr(other, table)
                        for key in record_fields(type(x)):
                            left, right = getattr(x, key), getattr(y, key)
                            assert left.dtype == right.dtype
                            assert np.array_equal(left, right, equal_nan=True), (table, key)
                    assert (structs.names, structs.categories) == (other.names, other.categories)
                    assert structs.process_names == other.process_names == {3: "dev"}
                    assert structs.thread_names == other.thread_names == {}
    assert structs.events.stream.tolist()[:2] == [7, -1]
    # the uint64 id keeps its low 64 bits (two's complement), so ids stay distinct
    assert structs.events.correlation.tolist()[-2] == 5 - 2**63
    assert structs.events.occupancy.tolist()[-2] == 50.0
