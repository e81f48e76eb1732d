"""Documentation is generated from the tables that declare metrics and settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens import catalog
from gpulens.config import SETTINGS
from gpulens.present.docs import PAGES

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
