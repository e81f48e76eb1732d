"""Every finding rule has its docs page, and every page names a rule (Datasette's test_docs)."""

from __future__ import annotations

from pathlib import Path

from gpulens.findings.engine import RULES
from gpulens.findings.fleet import FLEET_RULES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings"


def test_every_rule_has_a_page() -> None:
    for rule_id in [*RULES, *FLEET_RULES]:
        page = DOCS / f"{rule_id}.md"
        assert page.exists(), f"{page} is missing: document the {rule_id!r} rule"
        text = page.read_text(encoding="utf-8")
        assert f"`{rule_id}`" in text
        for section in ("## What it detects", "## Evidence", "## Thresholds", "## The fix"):
            assert section in text, (rule_id, section)


def test_every_page_names_a_rule_and_the_index_lists_them() -> None:
    pages = {p.stem for p in DOCS.glob("*.md") if p.name != "README.md"}
    rules = set(RULES) | set(FLEET_RULES)
    assert pages == rules, pages ^ rules
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for rule_id in rules:
        assert f"({rule_id}.md)" in index
