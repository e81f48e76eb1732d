"""`gpulens rules` alerts on an idle GPU at the idle finding's warning level, from the config."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulens.present import cli
from gpulens.present.prometheus import rules as prom_rules


def _idle_for(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    block = text[text.index("alert: GpulensGpuIdleAllocated") :]
    return block.split("for: ", 1)[1].split("\n", 1)[0]


def test_the_default_is_the_idle_warning_level() -> None:
    assert prom_rules.DEFAULT_IDLE_FOR == "1h"  # findings.idle_allocated.warn_minutes: 60


@pytest.mark.parametrize(("warn_minutes", "expected"), [(None, "1h"), ("90", "1h30m")])
def test_rules_take_idle_for_from_the_warn_minutes_setting(
    tmp_path: Path, warn_minutes: str | None, expected: str
) -> None:
    environ = {"GPULENS_FINDINGS_IDLE_ALLOCATED_WARN_MINUTES": warn_minutes}
    result = CliRunner().invoke(cli.app, ["rules", "-o", str(tmp_path)], env=environ)
    assert result.exit_code == 0, result.output
    assert _idle_for(tmp_path / prom_rules.RULES_FILE) == expected


def test_an_explicit_idle_for_wins(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, ["rules", "-o", str(tmp_path), "--idle-for", "45m"])
    assert result.exit_code == 0, result.output
    assert _idle_for(tmp_path / prom_rules.RULES_FILE) == "45m"


@pytest.mark.parametrize(("seconds", "text"), [(3600, "1h"), (5400, "1h30m"), (45, "45s")])
def test_promql_duration(seconds: float, text: str) -> None:
    assert prom_rules.promql_duration(seconds) == text
    assert prom_rules.check_duration(text) == text
