"""Fuzz: whatever text arrives, parse_exposition returns a result or raises DcgmParseError."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collect.dcgm.parse import DcgmParseError, ParseResult, parse_exposition

N_PAGES = 4  # real dcgm-exporter pages under cncf_k8s-ai-conformance (checked below)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = st.sampled_from(list('{}",=# \n\t\\_:.-+eE0123456789aAzZ\x00\x7fé\r'))


def _check(text: str) -> None:
    try:
        result = parse_exposition(text, "fuzz", 1)
    except DcgmParseError as err:
        assert err.source == "fuzz" and err.line_no >= 1
        return
    assert isinstance(result, ParseResult)
    for reading in result.readings:
        assert all(isinstance(v, float) for v in reading.values.values())


@cache
def _pages(shared: Path) -> tuple[str, ...]:
    root = shared / "data/telemetry/cncf_k8s-ai-conformance"
    return tuple(p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.prom")))


def test_real_pages_were_found(shared: Path) -> None:
    assert len(_pages(shared)) == N_PAGES


@FUZZ
@given(st.text())
def test_random_text(text: str) -> None:
    _check(text)


@FUZZ
@given(st.text(alphabet=ALPHABET, max_size=400))
def test_exposition_like_text(text: str) -> None:
    _check(text)


@FUZZ
@given(st.integers(0, N_PAGES - 1), st.data())
def test_truncations_of_real_pages(shared: Path, page: int, data: st.DataObject) -> None:
    text = _pages(shared)[page]
    _check(text[: data.draw(st.integers(0, len(text)))])


@FUZZ
@given(
    st.integers(0, N_PAGES - 1),
    st.lists(st.tuples(st.integers(0, 10**6), st.text(max_size=5)), min_size=1, max_size=6),
)
def test_mutations_of_real_pages(shared: Path, page: int, edits: list[tuple[int, str]]) -> None:
    text = _pages(shared)[page]
    for pos, insert in edits:
        at = pos % (len(text) + 1)
        text = text[:at] + insert + text[at + 1 :]
    _check(text)


@FUZZ
@given(st.binary(max_size=300))
def test_garbage_bytes(raw: bytes) -> None:
    _check(raw.decode("utf-8", errors="replace"))
    _check(raw.decode("latin-1"))
