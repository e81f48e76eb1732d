"""Threshold overrides from configuration reach the analysis dataclasses, validated."""

from __future__ import annotations

import pytest

from gpulens.app.session import analysis_settings
from gpulens.config import load_config
from gpulens.errors import ConfigError


def test_overrides_replace_only_the_named_fields() -> None:
    cfg = load_config(
        env={
            "GPULENS_THRESHOLDS_STATES": "sm_low=0.4, warmup_settle=3",
            "GPULENS_THRESHOLDS_FINDINGS": "warning_duration_s=1800",
            "GPULENS_FINDINGS_IDLE_ALLOCATED_WARN_MINUTES": "30",
        }
    )
    settings = analysis_settings(cfg)
    assert settings["states"].sm_low == 0.4
    assert settings["states"].warmup_settle == 3
    assert settings["states"].sm_good == 0.8  # untouched default
    thresholds = settings["finding_thresholds"]
    assert thresholds.warning_duration_s == 1800.0
    assert thresholds.critical_duration_s == 7200.0  # untouched default
    # the idle ladder comes from its own settings, in minutes
    assert thresholds.ladder("idle_allocated") == (600.0, 1800.0, 7200.0)


def test_the_idle_ladder_has_one_source_and_rises() -> None:
    cfg = load_config(env={"GPULENS_THRESHOLDS_FINDINGS": "idle_warn_s=1800"})
    with pytest.raises(ConfigError, match=r"findings\.idle_allocated\.warn_minutes"):
        analysis_settings(cfg)
    cfg = load_config(env={"GPULENS_FINDINGS_IDLE_ALLOCATED_ACT_MINUTES": "30"})
    with pytest.raises(ConfigError, match="must not decrease"):
        analysis_settings(cfg)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("sm_lo=0.4", "sm_low"), ("sm_low", "NAME=VALUE"), ("sm_low=high", "not a number")],
)
def test_bad_overrides_are_config_errors(value: str, fragment: str) -> None:
    cfg = load_config(env={"GPULENS_THRESHOLDS_STATES": value})
    with pytest.raises(ConfigError, match=fragment):
        analysis_settings(cfg)
