"""Fuzz the nvidia-smi parsers as ingest runs them (XML bytes streamed, CSV line by line,
within small limits): only gpulens's typed errors, within a deadline and a memory bound."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvsmi_captures import CAPTURE_DIR, CAPTURES, XML_DIR, XML_FILES, query_gpu_csv

from gpulens.collect.inputs import Limits, numbered_lines
from gpulens.collect.nvidia_smi import iter_query_csv, parse_nvsmi_xml_stream
from gpulens.errors import GpulensError

LIMITS = Limits(max_line_bytes=2048, max_string_bytes=256, max_nesting=12)
FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PEAK = 32 << 20
INSERTS = st.binary(max_size=4) | st.sampled_from(
    [b"<!ENTITY a 'b'>", b"&a;", b"<a>" * 20, b"\xe9", b"A" * 300, b"]]>", b"<!DOCTYPE x [", b","]
)


@pytest.fixture(scope="module")
def xml(shared: Path) -> list[bytes]:
    return [(shared / XML_DIR / name).read_bytes() for name in XML_FILES]


@pytest.fixture(scope="module")
def csv(shared: Path) -> list[bytes]:
    return [
        query_gpu_csv((shared / CAPTURE_DIR / name).read_text(), "load").encode()
        for name in CAPTURES.values()
    ]


def _bounded(run: Callable[[], object]) -> None:
    tracemalloc.start()
    try:
        run()
    except GpulensError:
        return
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < PEAK


def _xml(data: bytes) -> None:
    _bounded(lambda: parse_nvsmi_xml_stream(io.BytesIO(data), "fuzz.xml", 1, "h", LIMITS))


def _csv(data: bytes) -> None:
    def run() -> object:
        lines = numbered_lines(io.BytesIO(data), "fuzz.csv", LIMITS)
        text = ((n, line.decode("utf-8", "replace")) for n, line in lines)
        return list(iter_query_csv(text, "fuzz.csv", 1, "h"))

    _bounded(run)


def _mutate(raw: bytes, data: st.DataObject) -> bytes:
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(out)))
        out[at : at + data.draw(st.integers(0, 3))] = data.draw(INSERTS)
    return bytes(out)


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data: bytes) -> None:
    _xml(data)
    _csv(data)


@FUZZ
@given(st.data())
def test_mutations_of_real_xml(xml: list[bytes], data: st.DataObject) -> None:
    _xml(_mutate(data.draw(st.sampled_from(xml)), data))


@FUZZ
@given(st.data())
def test_mutations_of_real_csv(csv: list[bytes], data: st.DataObject) -> None:
    _csv(_mutate(data.draw(st.sampled_from(csv)), data))
