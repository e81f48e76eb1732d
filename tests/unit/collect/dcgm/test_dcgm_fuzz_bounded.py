"""Fuzz the exposition parser as ingest runs it (bytes, gzip or not, read line by line within
small limits): only gpulens's typed errors, within a deadline and a memory bound."""

from __future__ import annotations

import gzip
import io
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collect.dcgm.parse import ParseResult, parse_exposition_lines
from gpulens.collect.inputs import Limits, numbered_lines, open_bounded
from gpulens.errors import CollectError, GpulensError

LIMITS = Limits(max_inflated_bytes=64 << 10, max_line_bytes=1024, max_string_bytes=128)
FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PEAK = 32 << 20


@cache
def _pages(shared: Path) -> tuple[bytes, ...]:
    root = shared / "data/telemetry/cncf_k8s-ai-conformance"
    return tuple(p.read_bytes() for p in sorted(root.rglob("*.prom")))


def _lines(data: bytes) -> Iterator[tuple[int, str]]:
    stream = open_bounded(io.BytesIO(data), "fuzz.prom", LIMITS, lambda d: CollectError(d))
    for number, line in numbered_lines(stream, "fuzz.prom", LIMITS):
        yield number, line.decode("utf-8", "replace")


def _check(data: bytes) -> None:
    tracemalloc.start()
    try:
        result = parse_exposition_lines(_lines(data), "fuzz.prom", 1, "h", LIMITS)
    except GpulensError:
        return
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < PEAK
    assert isinstance(result, ParseResult)
    for reading in result.readings:
        assert all(len(v) <= LIMITS.max_string_bytes for v in reading.labels.values())


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    _check(data)
    _check(gzip.compress(data, mtime=0))


@FUZZ
@given(st.data())
def test_mutations_of_real_pages(shared: Path, data: st.DataObject) -> None:
    raw = bytearray(data.draw(st.sampled_from(_pages(shared))))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw)))
        insert = data.draw(st.binary(max_size=4) | st.just(b"A" * 200) | st.just(b"\\" * 300))
        raw[at : at + data.draw(st.integers(0, 3))] = insert
    _check(bytes(raw))
