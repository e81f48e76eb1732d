"""The streaming loader gives exactly what parsing each stored trace whole gives.

Reads ../shared/data/traces in place (the `shared` fixture): every file is loaded whole
(`chunk_bytes=None`) and streamed in small and default slices; every column, the string tables
and the metadata must be identical. The standard library's reading of the times is the
independent check of exactness. The parser handed bytes or a stream (a pipe, gzip) gives what
the app's load of the path gives.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpulens.analyze.traces import load as load_module
from gpulens.analyze.traces.load import TraceSource, load_trace
from gpulens.analyze.traces.model import Trace
from gpulens.app.traces import load_trace_file

TRACES = "data/traces"
Same = Callable[[Trace, Trace], None]  # the `same_trace` fixture (tests/conftest.py)


def _files(shared: Path) -> list[Path]:
    return sorted((shared / TRACES).rglob("*.json.gz"))


def _nested(shared: Path, tmp: Path) -> Path:
    """A stored trace with `traceEvents` keys nested in other top-level values, before and after
    the real one: only the top-level key holds the events, on every load path."""
    (source,) = [p for p in _files(shared) if p.name == "nccl_data.json.gz"]
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    decoy = {"traceEvents": events[:50], "note": '"traceEvents": ['}
    nested = {"decoy": decoy, **doc, "traceEvents": events, "after": [{"traceEvents": []}]}
    path = tmp / "nested_trace_events.json.gz"
    path.write_bytes(gzip.compress(json.dumps(nested).encode()))
    return path


def test_streamed_equals_whole_on_every_stored_trace(
    shared: Path, same_trace: Same, tmp_path: Path
) -> None:
    files = _files(shared)
    assert len(files) >= 20
    nested = _nested(shared, tmp_path)
    assert len(load_trace_file(nested).events) > 50
    for path in [*files, nested]:
        whole = load_trace_file(path, chunk_bytes=None)
        for chunk in (50_000, 1 << 18):
            same_trace(whole, load_trace_file(path, chunk_bytes=chunk))


class _Pipe:
    """A pipe-like stream: only `read(n)`, which gives at most 100 003 bytes at a time."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.reads = 0

    def read(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + min(n, 100_003)]
        self.pos += len(out)
        self.reads += 1
        return out


class _Raw(io.RawIOBase):
    """A non-seekable raw stream over bytes."""

    def __init__(self, data: bytes) -> None:
        self.pipe = _Pipe(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = self.pipe.read(len(buffer))
        buffer[: len(out)] = out
        return len(out)


@pytest.mark.parametrize(
    "name", ["nccl_data.json.gz", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"]
)
def test_bytes_and_streams_load_like_the_file(shared: Path, name: str, same_trace: Same) -> None:
    (path,) = [p for p in _files(shared) if p.name == name]
    from_file = load_trace_file(path)
    packed = path.read_bytes()
    text = gzip.decompress(packed)
    pipes = [_Pipe(packed), _Pipe(text)]
    sources: list[TraceSource] = [
        packed,  # gzip bytes
        text,  # JSON bytes
        *pipes,  # non-seekable streams, gzip and JSON
        io.BytesIO(packed),  # a seekable gzip stream
        gzip.GzipFile(fileobj=io.BufferedReader(_Raw(packed))),  # inflates itself
    ]
    for source in sources:
        trace = load_trace(source, name=str(path))
        same_trace(from_file, trace)
        assert trace.source == from_file.source == str(path)
    # the streams were read block by block, not at once
    assert all(p.reads > len(p.data) // 100_003 for p in pipes)
    same_trace(from_file, load_trace(_Pipe(packed), name=str(path), chunk_bytes=None))


@pytest.mark.parametrize(
    "name",
    [
        "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # absolute epoch µs floats
        "nccl_data.json.gz",  # relative µs floats with ns decimals
    ],
)
def test_streamed_times_are_the_decimal_text(shared: Path, name: str) -> None:
    (path,) = [p for p in _files(shared) if p.name == name]
    raw = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)["traceEvents"]
    timed = [e for e in raw if e.get("ph") not in ("M", "s", "f", "t")]
    trace = load_trace_file(path, chunk_bytes=50_000)
    assert trace.events.ts_ns.tolist() == [int(Decimal(e.get("ts", 0)) * 1000) for e in timed]
    durs = [int(Decimal(e["dur"]) * 1000) if "dur" in e else 0 for e in timed]
    assert trace.events.dur_ns.tolist() == durs


def test_struct_decoding_equals_orjson_dicts_on_every_stored_trace(
    shared: Path, monkeypatch: pytest.MonkeyPatch, same_trace: Same, tmp_path: Path
) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    # slices decode into msgspec structs (schema.py); the orjson dict path must give the same
    for path in [*_files(shared), _nested(shared, tmp_path)]:
        for chunk in (50_000, 1 << 18):
            structs = load_trace_file(path, chunk_bytes=chunk)
            monkeypatch.setattr(load_module, "_USE_STRUCTS", False)
            dicts = load_trace_file(path, chunk_bytes=chunk)
            monkeypatch.setattr(load_module, "_USE_STRUCTS", True)
            same_trace(structs, dicts)


class _Counting:
    """A msgspec decoder that counts the slices it decodes."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.decoded = 0

    def decode(self, text: Any) -> Any:
        result = self.decoder.decode(text)
        self.decoded += 1
        return result


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("df_index_resolver.json.gz", 0),  # integer µs times: the known-int schema
        ("mtia_rank_0.json.gz", 1),  # float µs times: the known schema
    ],
)
def test_typed_structs_decode_nearly_every_slice(
    shared: Path, name: str, level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    # the one-pass column paths need the typed structs (known phases and categories first); a
    # schema change that makes real slices fall back to the permissive ones would keep the
    # results and lose the speed
    (path,) = [p for p in _files(shared) if p.name == name]
    counting = tuple(_Counting(d) for d in load_module.struct_decoders())
    monkeypatch.setattr(load_module, "struct_decoders", lambda: counting)
    monkeypatch.setattr(load_module, "_USE_SCANNER", False)
    trace = load_trace_file(path)
    assert trace.raw_event_count > 100_000
    decoded = [c.decoded for c in counting]
    assert decoded[level] >= 50, decoded
    assert sum(decoded[:-1]) == decoded[level], decoded
    assert decoded[-1] <= 2, decoded  # the trace's closing spans, with string pids


@pytest.mark.skipif(not load_module.SCANNER, reason="the C scanner is not built")
def test_msgspec_waits_for_a_megabyte_left_to_python(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the scanner leaves only a trace's closing `Trace` spans (a few kB) to Python: orjson
    # parses them, and msgspec (~12 ms to import) is not loaded for them
    (path,) = [p for p in _files(shared) if p.name == "linear_kineto.json.gz"]
    code = (
        "import sys\n"
        "from gpulens.app.traces import load_trace_file\n"
        f"trace = load_trace_file({str(path)!r})\n"
        "print(trace.raw_event_count, 'msgspec' in sys.modules, 'orjson' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, msgspec_loaded, orjson_loaded = out.stdout.split()
    assert int(count) > 10_000 and (msgspec_loaded, orjson_loaded) == ("False", "True")
    # with every slice left to Python, the structs take over once a MiB has gone to orjson
    (big,) = [p for p in _files(shared) if p.name == "mtia_rank_0.json.gz"]
    counting = tuple(_Counting(d) for d in load_module.struct_decoders())
    monkeypatch.setattr(load_module, "struct_decoders", lambda: counting)
    monkeypatch.setattr(load_module, "_USE_SCANNER", False)
    by_structs = load_trace_file(big, chunk_bytes=1 << 16)
    decoded = sum(c.decoded for c in counting)
    inflated = len(gzip.decompress(big.read_bytes()))
    assert (inflated >> 16) - 20 <= decoded < inflated >> 16  # all but the first ~1 MiB
    monkeypatch.setattr(load_module, "_USE_STRUCTS", False)
    assert by_structs.raw_event_count == load_trace_file(big).raw_event_count


def test_an_unknown_category_costs_one_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    # a category newer than the known list: the typed schema takes over after the first slice
    event = (
        '{"ph": "X", "cat": "%s", "name": "k", "pid": 1, "tid": 2, "ts": %d, "dur": 1, '
        '"args": {"correlation": %d}}'
    )
    events = [event % ("new_runtime" if i % 50 == 0 else "kernel", i, i) for i in range(5000)]
    path = tmp_path / "new.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}", encoding="utf-8")
    counting = tuple(_Counting(d) for d in load_module.struct_decoders())
    monkeypatch.setattr(load_module, "struct_decoders", lambda: counting)
    monkeypatch.setattr(load_module, "_USE_SCANNER", False)
    trace = load_trace_file(path, chunk_bytes=10_000)
    assert trace.categories == ["new_runtime", "kernel"]
    assert trace.events.correlation.tolist() == list(range(5000))
    assert trace.events.ts_ns.tolist() == [i * 1000 for i in range(5000)]
    known_int, known, typed, permissive = (c.decoded for c in counting)
    assert known_int == known == permissive == 0
    assert typed >= 20


@pytest.mark.skipif(
    not load_module.SCANNER and not os.environ.get("CI"), reason="the C scanner is not built"
)
def test_scanner_equals_structs_on_every_stored_trace_and_reads_nearly_every_slice(
    shared: Path, monkeypatch: pytest.MonkeyPatch, same_trace: Same, tmp_path: Path
) -> None:
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    # the C scanner (`_scan.c`) reads slices straight into columns; the msgspec structs are the
    # reference it must equal, on every stored trace, at two slice sizes
    assert load_module.SCANNER, "the C scanner must be built in CI (setup.py, a C compiler)"
    scan = load_module._scan_slice
    assert scan is not None
    calls = {"read": 0, "left": 0}

    def counted(text: Any, start: int, end: int, *limits: int) -> Any:
        result = scan(text, start, end, *limits)
        calls["read" if result is not None else "left"] += 1
        return result

    for path in [*_files(shared), _nested(shared, tmp_path)]:
        for chunk in (50_000, 1 << 19):
            monkeypatch.setattr(load_module, "_scan_slice", counted)
            scanned = load_trace_file(path, chunk_bytes=chunk)
            monkeypatch.setattr(load_module, "_USE_SCANNER", False)
            structs = load_trace_file(path, chunk_bytes=chunk)
            monkeypatch.setattr(load_module, "_USE_SCANNER", True)
            same_trace(scanned, structs)
    # what it leaves to Python: the closing `Trace` spans (string pids), HIP's string streams
    assert calls["read"] > 20 * calls["left"], calls
