"""One setting serves the idle finding's ladder, the `gpulens rules` alert and enforce's
levels: changed once, all three move."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpulens.app import session
from gpulens.app.enforce import policy
from gpulens.config import load_config


def test_one_setting_drives_finding_alert_and_enforce(tmp_path: Path) -> None:
    config = tmp_path / "gpulens.toml"
    config.write_text("[findings.idle_allocated]\nwarn_minutes = 30\nact_minutes = 90\n")
    cfg = load_config(config, env={})
    thresholds = session.finding_thresholds(cfg)
    assert (thresholds.idle_warn_s, thresholds.idle_critical_s) == (1800, 5400)
    pol = policy(cfg, dry_run=True)
    assert (pol.warn_s, pol.act_s) == (1800, 5400)
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "rules", "-o", str(tmp_path), "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rules = (tmp_path / "gpulens.rules.yml").read_text()
    idle = rules[rules.index("alert: GpulensGpuIdleAllocated") :]
    assert idle.split("for: ", 1)[1].split("\n", 1)[0] == "30m"


def test_defaults_are_jobstats(tmp_path: Path) -> None:
    pol = policy(load_config(None, env={}, overrides={"data_dir": str(tmp_path)}), dry_run=True)
    assert (pol.warn_s, pol.act_s, pol.act_enabled, pol.command) == (
        3600, 7200, False, "scancel {job}"
    )  # fmt: skip
