"""What one tick of the scheduler did: each collector's outcome and the readings it produced.

Its own module so that the self-stats (selfstats.py) can read ticks without importing the
scheduler that makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpulens.model import Reading

Status = Literal["ok", "error", "timeout", "skipped"]


@dataclass(frozen=True, slots=True)
class CollectorOutcome:
    """What one collector did in one tick. `duration_s` is wall time (0 when skipped)."""

    status: Status
    duration_s: float = 0.0
    readings: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TickResult:
    """One tick: its grid time `ts`, how late it started, what each collector did, the readings
    handed to the sink (after the rate stage), whether the sink flushed, grid points missed."""

    ts: int
    lag_s: float
    outcomes: dict[str, CollectorOutcome] = field(default_factory=dict)
    readings: list[Reading] = field(default_factory=list)
    flushed: bool = False
    missed_ticks: int = 0
    sink_error: str | None = None
