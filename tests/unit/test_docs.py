"""Documentation is generated from the tables that declare metrics and settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpulens import catalog
from gpulens.analyze.states import Thresholds
from gpulens.config import SETTINGS
from gpulens.present.docs import PAGES, SECTIONS, field_docs, spliced, thresholds_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_generated_pages_are_committed_and_current(name: str) -> None:
    path = DOCS / name
    assert path.exists(), f"{path} is missing: run `make docs`"
    assert path.read_text(encoding="utf-8") == PAGES[name](), f"{path} is stale: run `make docs`"


def test_every_metric_and_setting_is_documented() -> None:
    metrics = (DOCS / "metrics.md").read_text(encoding="utf-8")
    for m in catalog.ALL_METRICS:
        assert f"`{m.name}`" in metrics
    config = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for s in SETTINGS:
        assert f"`{s.key}`" in config and s.env_name in config


@pytest.mark.parametrize("page", sorted(SECTIONS))
def test_generated_sections_are_current(page: str) -> None:
    path = DOCS / page
    text = path.read_text(encoding="utf-8")
    name, render = SECTIONS[page]
    assert spliced(text, name, render()) == text, f"{path}: the {name} table is stale: `make docs`"


def test_every_threshold_has_its_meaning_in_the_code() -> None:
    meanings = field_docs(Thresholds)
    assert [f.name for f in dataclasses.fields(Thresholds) if not meanings.get(f.name)] == []
    table = thresholds_markdown()
    for f in dataclasses.fields(Thresholds):
        assert f"| `{f.name}` |" in table
    assert "| `idle_memory_bytes` | 268435456 (256 MiB) |" in table
    assert "| `warmup_max_s` | 900 s |" in table


def test_a_changed_threshold_shows_as_stale() -> None:
    text = (DOCS / "analysis/states.md").read_text(encoding="utf-8")
    changed = thresholds_markdown().replace("| `sm_low` | 0.5 |", "| `sm_low` | 0.4 |")
    assert spliced(text, "thresholds", changed) != text
    with pytest.raises(ValueError, match="markers"):
        spliced("# a page without markers\n", "thresholds", changed)
