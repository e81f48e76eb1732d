"""What every page builds on: the settings that price and judge, and one analysed window.

`analyse_window` runs the report pipeline (interval frame → states → useful work → waste,
`findings.engine.build_context`) once for a window; the pages take what they need from the
`Analysed` result, and the findings rules run only when a page asks for them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.analyze.carbon import DEFAULT_REGION
from gpulens.analyze.efficiency import Thresholds
from gpulens.analyze.memory import MemorySettings
from gpulens.analyze.prices import Prices
from gpulens.analyze.rollups import CAUSE_NAMES
from gpulens.findings.context import Context, FindingThresholds
from gpulens.findings.engine import build_context, run_rules
from gpulens.findings.model import Finding
from gpulens.present.dashboard.window import Window
from gpulens.store import Store
from gpulens.store.events import events
from gpulens.store.frames import gpu_intervals

#: the GPU-hour split every rollup row carries
HOURS_KEYS: tuple[str, ...] = (
    "gpus",
    "gpu_hours",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "wasted_gpu_hours",
    "warmup_gpu_hours",
)
#: duty cycle, SM and tensor activity, side by side
ACTIVITY_KEYS: tuple[str, ...] = ("mean_duty", "mean_sm_active", "mean_tensor_active")
#: what the waste costs
PRICE_KEYS: tuple[str, ...] = ("energy_kwh", "total_cost", "wasted_cost", "co2e_kg")


@dataclass(frozen=True)
class Settings:
    """Prices, carbon region, quotas and thresholds (the agent's configured ones)."""

    prices: Prices = field(default_factory=Prices)
    region: str | float = DEFAULT_REGION
    quotas: Mapping[str, float] | None = None
    states: Thresholds | None = None
    finding_thresholds: FindingThresholds | None = None
    memory: MemorySettings | None = None
    max_gap_s: float | None = None  # the coverage rule's cap (analysis.max_gap_seconds)

    @classmethod
    def of(
        cls,
        prices: Prices,
        region: str | float,
        quotas: Mapping[str, float] | None,
        analysis: Mapping[str, Any],
    ) -> Settings:
        """From an agent context's fields (`analysis` as `session.analysis_settings` gives)."""
        return cls(
            prices=prices,
            region=region,
            quotas=quotas,
            states=analysis.get("states"),
            finding_thresholds=analysis.get("finding_thresholds"),
            memory=analysis.get("memory"),
            max_gap_s=analysis.get("max_gap_s"),
        )


@dataclass
class Analysed:
    """One window through the report pipeline. `context` is None when it holds no GPU rows."""

    window: Window
    context: Context | None
    settings: Settings
    _findings: list[Finding] | None = None
    profiles_dir: Path | None = None  # the local data dir, where profiles on demand are
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def frame(self) -> pa.Table:
        """The annotated interval frame (state, useful work, waste, cost, per interval)."""
        return self.context.frame if self.context is not None else pa.table({})

    @property
    def empty(self) -> bool:
        return self.context is None or self.context.frame.num_rows == 0

    def findings(self) -> list[Finding]:
        """The findings rules over the window (run once, on first use), largest impact first."""
        with self._lock:
            if self._findings is None:
                self._findings = run_rules(self.context) if self.context is not None else []
            return self._findings


def analyse_window(
    store: Store, window: Window, settings: Settings, where: Mapping[str, str] | None = None
) -> Analysed:
    """The interval frame of `window` (optionally filtered on labels) through states, useful
    work and waste; findings rules run lazily (`Analysed.findings`)."""
    frame = gpu_intervals(
        store,
        step_s=float(window.step_s),
        start_ns=window.start_ns,
        end_ns=window.end_ns,
        where=where,
        max_gap_s=settings.max_gap_s,
    )
    local = store.data_dir if isinstance(store.data_dir, Path) else None
    if frame.num_rows == 0:
        return Analysed(window, None, settings, profiles_dir=local)
    ctx = build_context(
        frame,
        events(store, window.start_ns, window.end_ns),
        thresholds=settings.finding_thresholds,
        states=settings.states,
        memory=settings.memory,
        prices=settings.prices,
        region=settings.region,
        quotas=settings.quotas,
    )
    return Analysed(window, ctx, settings, profiles_dir=local)


# -- plain values for JSON ---------------------------------------------------------------------


def num(x: Any) -> float | None:
    """A finite float, or None (missing, NaN and infinities are not numbers JSON can carry)."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def clean(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with non-finite floats as None (everything else unchanged)."""
    return {k: (num(v) if isinstance(v, float) else v) for k, v in row.items()}


def rows(table: pa.Table, columns: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """A table as cleaned dicts, keeping `columns` (those present) when given."""
    if columns is not None:
        keep = [c for c in columns if c in table.column_names]
        table = table.select(keep)
    return [clean(r) for r in table.to_pylist()]


def column(table: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float64 with NaN for null (all NaN when absent)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    col = table.column(name).cast(pa.float64())
    return np.asarray(col.fill_null(np.nan).to_numpy(), dtype=np.float64)


def ints(table: pa.Table, name: str) -> np.ndarray:
    """An integer column (e.g. `start_ns`) as int64."""
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def nums(values: np.ndarray) -> list[float | None]:
    """A float array as a list with NaN as None."""
    return [None if math.isnan(v) else v for v in values.tolist()]


def gpu_label(host: Any, index: Any, uuid: Any) -> str:
    """How a person names a GPU: "host/index" (a short UUID when the index is unknown)."""
    idx = str(index) if index not in (None, "") else str(uuid or "?")[:12]
    return f"{host or '-'}/{idx}"


def gpu_sort_key(host: Any, index: Any) -> tuple[str, int, str]:
    text = str(index or "")
    return (str(host or ""), int(text) if text.isdigit() else 1 << 30, text)


def top_cause(rollup_row: Mapping[str, Any]) -> str | None:
    """The waste cause with the most GPU-hours in a rollup row (None when nothing was wasted)."""
    best, hours = None, 0.0
    for cause in CAUSE_NAMES:
        h = rollup_row.get(f"wasted_gpu_hours_{cause}") or 0.0
        if h > hours:
            best, hours = cause, h
    return best
