"""The layer contract of DESIGN.md, checked by import-linter (also run by `make test`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_layers_point_one_way() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
