"""The trace loader is bounded by the `limits.*` settings whatever the input: gzip bombs, huge
strings, deep nesting, many events, whitespace and garbage end in one clear error (naming the
input, the limit and the setting) after reading little, and bad times are a TraceFormatError.

The inputs are the corpus's shapes (tests/corpus/traces.py) at small sizes, with small limits
where a limit is what is tested: the same code paths as the defaults at GB sizes.
"""

from __future__ import annotations

import gzip
import io
import time
from pathlib import Path
from typing import Any

import pytest
from tests.corpus import traces as corpus

from gpulens.analyze.traces import load as load_module
from gpulens.analyze.traces.limits import TraceLimits
from gpulens.analyze.traces.load import load_trace
from gpulens.app.traces import load_trace_file, trace_limits
from gpulens.config import load_config
from gpulens.errors import ConfigError, InputTooLarge, TraceFormatError

MiB = 1 << 20
SMALL = TraceLimits(max_inflated_bytes=4 * MiB, max_events=1000, max_string_bytes=4096)
PATHS = ("scanner", "structs", "dicts", "whole")  # every way a slice or a document is parsed


class _Counting(io.RawIOBase):
    """A stream that cannot seek and counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out = self.data[self.pos : self.pos + len(buffer)]
        buffer[: len(out)] = out
        self.pos += len(out)
        return len(out)


def _load(path: Path, how: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    monkeypatch.setattr(load_module, "_USE_SCANNER", how == "scanner")
    monkeypatch.setattr(load_module, "_USE_STRUCTS", how != "dicts")
    monkeypatch.setattr(load_module, "_STRUCTS_AFTER", 0)  # structs from the first slice
    chunk = None if how == "whole" else 4096
    return load_trace_file(path, chunk_bytes=chunk, **kw)


def _refused(exc: pytest.ExceptionInfo[Exception], path: Path, setting: str) -> None:
    message = str(exc.value)
    assert message.startswith(f"{path}: ") and setting in message and "\n" not in message
    env = "GPULENS_" + setting.replace(".", "_").upper()
    assert env in message


def test_a_gzip_bomb_of_zeros_is_refused_from_its_first_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = corpus.gzip_zeros(tmp_path, 64 * MiB)
    inflated = [0]
    original = load_module.blocks

    def counted(*args: Any) -> Any:
        for block in original(*args):
            inflated[0] += len(block)
            yield block

    monkeypatch.setattr(load_module, "blocks", counted)
    start = time.perf_counter()
    with pytest.raises(TraceFormatError, match=r"^up\.json\.gz: not valid JSON \(unexpected"):
        load_trace(_Counting(path.read_bytes()), name="up.json.gz")
    assert time.perf_counter() - start < 2.0
    assert 0 < inflated[0] <= 2 * MiB  # refused after one block of the 64 MiB


def test_a_bomb_that_streams_stops_at_the_inflated_limit(tmp_path: Path) -> None:
    path = corpus.gzip_events(tmp_path, 64 * MiB)  # valid JSON as far as it goes
    small = TraceLimits(max_inflated_bytes=4 * MiB)
    with pytest.raises(InputTooLarge, match="decompressed, passes the limit of 4,194,304") as e:
        load_trace_file(path, limits=small)
    _refused(e, path, "limits.max_inflated_bytes")
    plain = corpus.valid(tmp_path, 5 * MiB)  # uncompressed input counts the same
    with pytest.raises(InputTooLarge, match=r"limits.max_inflated_bytes"):
        load_trace_file(plain, limits=small)
    with pytest.raises(InputTooLarge, match=r"limits.max_inflated_bytes"):
        load_trace_file(plain, limits=small, chunk_bytes=None)


@pytest.mark.parametrize("how", PATHS)
def test_one_huge_string_is_refused_on_every_path(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = corpus.huge_string(tmp_path, 64 * 1024)
    with pytest.raises(InputTooLarge, match=r"a JSON string .* 4,096 bytes") as e:
        _load(path, how, monkeypatch, limits=SMALL)
    _refused(e, path, "limits.max_string_bytes")
    meta = corpus.huge_metadata_string(tmp_path, 64 * 1024)
    with pytest.raises(InputTooLarge, match=r"limits.max_string_bytes"):
        _load(meta, how, monkeypatch, limits=SMALL)


def test_a_string_of_64_mib_is_refused_after_a_few_mib(tmp_path: Path) -> None:
    text = b'{"traceEvents": [{"ph": "X", "name": "' + b"a" * (64 * MiB)
    stream = _Counting(text)
    start = time.perf_counter()
    with pytest.raises(InputTooLarge, match=r"limits.max_string_bytes"):
        load_trace(stream, name="big.json")
    assert stream.pos < 8 * MiB and time.perf_counter() - start < 5.0


@pytest.mark.parametrize("how", PATHS)
def test_deep_nesting_is_refused_on_every_path(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = corpus.deep_nesting(tmp_path, 1_000_000)  # 100,000 nested objects
    with pytest.raises(InputTooLarge, match=r"nesting .* 64 levels") as e:
        _load(path, how, monkeypatch)
    _refused(e, path, "limits.max_nesting")
    # within the limit: loads, as deep as the limit allows
    ok = tmp_path / "ok.json"
    args = '{"a": ' * 61 + "1" + "}" * 61
    ok.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": ' + args + "}]}")
    assert len(_load(ok, how, monkeypatch).events) == 1
    with pytest.raises(InputTooLarge, match=r"limits.max_nesting"):
        _load(ok, how, monkeypatch, limits=TraceLimits(max_nesting=32))


@pytest.mark.parametrize("how", PATHS)
def test_too_many_events(tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = corpus.many_tiny_events(tmp_path, 64 * 1024)  # ~3,000 events
    with pytest.raises(InputTooLarge, match="number of events passes the limit of 1,000") as e:
        _load(path, how, monkeypatch, limits=SMALL)
    _refused(e, path, "limits.max_events")
    assert _load(path, how, monkeypatch).raw_event_count > 3000


def test_whitespace_is_skipped_fast_and_never_held(tmp_path: Path) -> None:
    path = corpus.whitespace(tmp_path, 64 * MiB)
    widest = [0]
    original = load_module._Text.more

    def more(self: Any, keep_from: int) -> int:
        shift = original(self, keep_from)
        widest[0] = max(widest[0], len(self.buf))
        return shift

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load_module._Text, "more", more)
        start = time.perf_counter()
        with pytest.raises(TraceFormatError, match="empty file"):
            load_trace(_Counting(path.read_bytes()), name="ws.json")
        assert time.perf_counter() - start < 3.0  # was ~3.5 s (a Python loop per byte)
    assert widest[0] < 2 * MiB
    # whitespace before, between and after the events of a valid trace
    assert len(load_trace_file(corpus.whitespace_around(tmp_path, 32 * MiB)).events) == 2


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"abc"', r"the `ts` of an event is 'abc', not a number"),
        ("1e308", r"`ts` or `dur` is out of range"),
        ("-1e300", r"the `ts` of an event is out of range|`ts` or `dur` is out of range"),
        ("1e17", r"the `ts` of an event is out of range"),
    ],
)
@pytest.mark.parametrize("how", PATHS)
def test_times_that_are_not_numbers_or_out_of_range(
    tmp_path: Path, value: str, message: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "times.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": ' + value + ', "dur": 1}]}')
    with pytest.raises(TraceFormatError, match=message) as e:
        _load(path, how, monkeypatch)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize("how", PATHS)
def test_only_the_top_level_trace_events(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = '{"ph": "X", "ts": %d, "dur": 1, "name": "k%d"}'
    nested = ", ".join(event % (i, i) for i in range(50))
    path = tmp_path / "nested.json"
    path.write_text(
        '{"a": {"traceEvents": [' + nested + ']}, "b": [{"traceEvents": []}], '
        '"traceEvents": [' + event % (7, 7) + '], "c": "\\"traceEvents\\": ["}'
    )
    trace = _load(path, how, monkeypatch)
    assert [trace.names[i] for i in trace.events.name] == ["k7"]
    assert sorted(trace.metadata) == ["a", "b", "c"]
    only_nested = tmp_path / "only_nested.json"
    only_nested.write_text('{"a": {"traceEvents": [' + nested + "]}}")
    with pytest.raises(TraceFormatError, match=r"no `traceEvents` in the JSON object \(keys: a\)"):
        _load(only_nested, how, monkeypatch)


def test_no_trace_events_is_one_linear_pass(tmp_path: Path) -> None:
    # every byte of the root's members is looked at a bounded number of times (it was re-scanned
    # once per block read: quadratic), and only a bounded part of the text is held
    path = corpus.no_trace_events(tmp_path, 32 * MiB)
    seen = [0]
    original = load_module._walk
    assert original is not None

    def counted(buf: bytearray, pos: int, end: int, *limits: int) -> Any:
        status, at, keys = original(buf, pos, end, *limits)
        seen[0] += end - pos
        return status, at, keys

    widest = [0]
    more = load_module._Text.more

    def widened(self: Any, keep_from: int) -> int:
        shift = more(self, keep_from)
        widest[0] = max(widest[0], len(self.buf))
        return shift

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(load_module, "_walk", counted)
        patch.setattr(load_module, "HELD_BYTES", 4 * MiB)
        patch.setattr(load_module._Text, "more", widened)
        with pytest.raises(TraceFormatError, match=r"no `traceEvents` .*keys: inner, k000"):
            load_trace_file(path)
    assert seen[0] < 3 * path.stat().st_size
    assert widest[0] < 6 * MiB  # the metadata held is bounded too


def test_limits_come_from_the_settings(tmp_path: Path) -> None:
    # with no `GPULENS_LIMITS_*` variable the settings are not read: their defaults must be
    # the loader's own
    assert trace_limits(cfg=load_config(env={})) == TraceLimits() == trace_limits({})
    assert trace_limits({"GPULENS_COLLECT_INTERVAL_SECONDS": "oops"}) == TraceLimits()
    env = {"GPULENS_LIMITS_MAX_STRING_BYTES": "100", "GPULENS_LIMITS_MAX_EVENTS": "5"}
    assert trace_limits(env) == TraceLimits(max_string_bytes=100, max_events=5)
    with pytest.raises(ConfigError, match="GPULENS_LIMITS_MAX_NESTING"):
        trace_limits({"GPULENS_LIMITS_MAX_NESTING": "lots"})


@pytest.mark.parametrize("name", sorted(corpus.CASES))
def test_every_corpus_shape_loads_or_is_one_typed_error(tmp_path: Path, name: str) -> None:
    path = corpus.CASES[name](tmp_path, 256 * 1024)
    if name in corpus.VALID:
        assert load_trace_file(path).raw_event_count > 0
        return
    with pytest.raises((TraceFormatError, InputTooLarge)) as e:
        load_trace_file(path, limits=SMALL)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_a_gzip_member_cut_short_is_still_named(tmp_path: Path) -> None:
    data = gzip.compress(b'{"traceEvents": []}' * 1000)
    with pytest.raises(TraceFormatError, match=r"^cut\.gz: truncated gzip"):
        load_trace(data[: len(data) // 2], name="cut.gz", limits=SMALL)
