"""The exposition parser within limits: a long label value costs its size, not hundreds of
times it; a value or line past limits.max_string_bytes / max_line_bytes is refused by line."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gpulens.collect.dcgm.parse import parse_exposition, parse_exposition_lines
from gpulens.collect.inputs import Limits
from gpulens.errors import InputTooLarge

PAGE = "data/telemetry/cncf_k8s-ai-conformance/v1.35/vks/accelerator_metrics.prom"
MODEL = 'modelName="GRID A100-40C"'


def _page(shared: Path, model: str) -> str:
    text = (shared / PAGE).read_text()
    assert MODEL in text
    return text.replace(MODEL, f'modelName="{model}"')


def _peak(text: str, limits: Limits) -> tuple[int, str]:
    tracemalloc.start()
    try:
        result = parse_exposition(text, "page.prom", 1, limits=limits)
        return tracemalloc.get_traced_memory()[1], result.readings[0].labels["gpu_model"]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("unit", ["A", "\\n"])
def test_a_long_label_value_costs_its_size(shared: Path, unit: str) -> None:
    value = unit * ((1 << 20) // len(unit))  # 1 MiB of plain text, or of escapes
    text = _page(shared, value)
    lines = text.count(value)
    peak, model = _peak(text, Limits(max_string_bytes=2 << 20))
    assert len(model) == (1 << 20) // len(unit)
    # the page itself is not counted (it was built before); each line's label block is held
    # once or twice, never at the ~170 bytes per character the backtracking regex took
    assert peak < 4 * lines * (1 << 20), (peak, lines)


def test_a_label_value_past_the_limit_is_refused_by_line(shared: Path) -> None:
    text = _page(shared, "A" * 5000)
    with pytest.raises(InputTooLarge) as err:
        parse_exposition(text, "page.prom", 1, limits=Limits(max_string_bytes=4096))
    assert str(err.value).startswith("page.prom, line 3: the value of label 'modelName' is")
    assert "limits.max_string_bytes" in str(err.value)
    assert "GPULENS_LIMITS_MAX_STRING_BYTES" in str(err.value)


def test_a_line_past_the_limit_is_refused(shared: Path) -> None:
    text = _page(shared, "A" * 5000)
    with pytest.raises(InputTooLarge, match=r"page\.prom, line 3: the line .*max_line_bytes"):
        parse_exposition(text, "page.prom", 1, limits=Limits(max_line_bytes=4096))


def test_the_fallback_parser_is_held_to_the_label_limit() -> None:
    line = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="' + "A" * 5000 + '"} 5 1 2'
    with pytest.raises(InputTooLarge, match="label 'modelName'"):
        parse_exposition(line, "p", 1, limits=Limits(max_string_bytes=4096))


def test_lines_and_text_parse_the_same(shared: Path) -> None:
    for path in sorted((shared / PAGE).parents[1].rglob("*.prom")):
        text = path.read_text()
        pairs = enumerate(text.split("\n"), start=1)
        assert parse_exposition_lines(pairs, "p", 1) == parse_exposition(text, "p", 1)
