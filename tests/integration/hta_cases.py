"""The shared reference cases of HTA (../shared/data/traces-reference/cases.csv) and the
tolerance the tests compare gpulens's figures with HTA's by."""

from __future__ import annotations

import csv
import json
from pathlib import Path

TRACES = "data/traces"
REFERENCE = "data/traces-reference"


def close(ours: float, hta: float) -> bool:
    """Within 0.1 µs or 0.01 % of HTA's figure."""
    return abs(ours - hta) <= max(0.1, abs(hta) * 1e-4)


def reference_cases(shared: Path, *, completed: bool = False) -> dict[str, dict[int, Path]]:
    """case → {rank: trace file}; `completed`: only the cases HTA finished (with outputs)."""
    rows = csv.reader((shared / REFERENCE / "cases.csv").open(encoding="utf-8"))
    next(rows)
    return {
        case: {int(r): shared / TRACES / p for r, p in json.loads(files).items()}
        for case, files in rows
        if not completed or (shared / REFERENCE / case / "unrounded").is_dir()
    }
