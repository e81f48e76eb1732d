"""Fuzz the CSV importer: random bytes, mutations of a real export (plain and gzip) and damaged
gzip streams may only raise gpulens's typed errors, within a deadline and a memory bound."""

from __future__ import annotations

import gzip
import tarfile
import tracemalloc
from datetime import timedelta
from functools import cache
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collect.csv_import import ColumnMap, get_preset, parse_csv_table
from gpulens.collect.inputs import Limits
from gpulens.errors import GpulensError

TRACE = "data/clusters/alibaba-genai-v2026/pod_gpu_duty_cycle_anon.tar.gz"
MEMBER = "pod_gpu_duty_cycle_anon.csv"
LIMITS = Limits(max_inflated_bytes=64 << 10, max_line_bytes=512, max_string_bytes=64)
FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ALPHABET = st.sampled_from(list(',"\n\r\t 0123456789.eE-+:TZnaNvlue_timestamp\x00\xff'))
PEAK = 32 << 20


@cache
def _real(shared: Path) -> bytes:
    """The first 60 lines of the real Alibaba duty-cycle export."""
    with tarfile.open(shared / TRACE, "r|gz") as archive:
        for info in archive:
            if Path(info.name).name == MEMBER:
                stream = archive.extractfile(info)
                assert stream is not None
                return b"".join(stream.readline() for _ in range(60))
    raise AssertionError(f"{MEMBER} not in {TRACE}")


def _map() -> ColumnMap:
    mapping = get_preset("alibaba-genai-2026")(MEMBER)
    assert isinstance(mapping, ColumnMap)
    return mapping


def _check(data: bytes) -> None:
    tracemalloc.start()
    try:
        tables = parse_csv_table(data, _map(), "fuzz.csv", limits=LIMITS)
    except GpulensError as exc:
        assert "fuzz.csv" in str(exc)
        return
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < PEAK
    for table in tables.values():
        assert table.column("ts").type == pa.int64()


def test_the_real_export_parses(shared: Path) -> None:
    tables = parse_csv_table(_real(shared), _map(), "fuzz.csv", limits=LIMITS)
    assert sum(t.num_rows for t in tables.values()) == 59


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    _check(data)
    _check(gzip.compress(data, mtime=0))


@FUZZ
@given(st.text(alphabet=ALPHABET, max_size=600))
def test_csv_like_text(text: str) -> None:
    _check(("value,timestamp_anon,container_ip\n" + text).encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.data())
def test_mutations_of_a_real_export(shared: Path, data: st.DataObject) -> None:
    raw = bytearray(_real(shared))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw)))
        raw[at : at + data.draw(st.integers(0, 3))] = data.draw(st.binary(max_size=4))
    _check(bytes(raw))


@FUZZ
@given(st.data())
def test_damaged_gzip_of_a_real_export(shared: Path, data: st.DataObject) -> None:
    raw = bytearray(gzip.compress(_real(shared), mtime=0))
    cut = data.draw(st.integers(0, len(raw)))
    raw = raw[:cut] if data.draw(st.booleans()) else raw
    for _ in range(data.draw(st.integers(0, 4))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    _check(bytes(raw))
