"""The interval frame's columns, declared once: how each is aggregated per bucket and output.

Every per-bucket aggregate is an `Agg` in one of the `PARTS` (one per raw table and grouping);
`OUTPUT` lists the frame's columns over the joined aggregates. `gpulens.store.frames` turns
these into DuckDB SQL (over raw rows and the frames cache); `gpulens.store.recent_frame`
computes the same frame over in-memory Arrow tables with numpy. A column computed from
several inputs carries its SQL (`Agg.expr`, `OUTPUT`'s expression) and its numpy counterpart
(`Agg.compute`, `OUTPUT_NUMPY` with `OUTPUT_NULLS`) side by side, so the two paths cannot
disagree on which columns exist or how each is computed.

No I/O and no query engine here: this module only declares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from gpulens.catalog import POWER_REASON_BITS, THERMAL_REASON_BITS
from gpulens.model import ATTRIBUTION_LABELS

GPU_LABELS: tuple[str, ...] = ("host", "gpu_uuid", "gpu_index", "gpu_model", "mig_instance")
# the attribution columns, in schema order: the top process's pid and its attribution labels
PROCESS_LABELS: tuple[str, ...] = ("pid", *ATTRIBUTION_LABELS)

MEAN, MIN, MAX, FIRST, LAST, ANY, COUNT = "mean", "min", "max", "first", "last", "any", "count"
SUM = "sum"  # a derived column that adds up across buckets (the coverage seconds)

#: a raw table's column by name, as numpy: `ts` as int64 ns, a metric as float64 (NaN = null)
Columns = Callable[[str], np.ndarray]


class Joined(Protocol):
    """The joined aggregates (`g.cov_s`, `pa.processes`) and the parameters (`$step_ns`) by
    name: `v(name)` the values (float64 where a column can be null: NaN there, and NaN as a
    value too, the result of `inf - inf`), `v.null(name)` where the column is null."""

    def __call__(self, name: str) -> Any: ...

    def null(self, name: str) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Agg:
    """One aggregated column of a part: `name` (a frame column or an input of one), `kind` (how
    rows combine: MEAN, MIN, MAX, FIRST / LAST non-null value by time, ANY value, COUNT of
    rows) and `expr`, the SQL over one raw row (a metric name, or an expression of several).
    `compute` is `expr` in numpy (over `Columns`), for the expressions that are not a column.

    A MEAN is kept in the cache as its sum `s_<name>` and count `n_<name>`; every other kind
    as `<name>`, re-aggregated with itself (FIRST / LAST by bucket, COUNT by summing)."""

    name: str
    kind: str
    expr: str = ""
    compute: Callable[[Columns], np.ndarray] | None = None

    @property
    def source(self) -> str:
        return self.expr or self.name


def _throttle(bits: int) -> str:
    """1.0 for a sample whose `clocks_event_reasons` mask has any of `bits` set, else 0.0."""
    return f"((clocks_event_reasons::BIGINT & {bits}) <> 0)::DOUBLE"


def _throttle_np(col: Columns, bits: int) -> np.ndarray:
    """`_throttle` in numpy: NaN where the mask is null."""
    mask = col("clocks_event_reasons")
    null = np.isnan(mask)
    ints = to_bigint(np.where(null, 0.0, mask), "clocks_event_reasons")
    return np.where(null, np.nan, ((ints & bits) != 0).astype(np.float64))


def _coalesce(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(first), then, first)


_BIGINT_END = 2.0**63  # the first double past BIGINT's range (and -2**63 the last one in it)


def to_bigint(x: np.ndarray, what: str) -> np.ndarray:
    """DOUBLE → BIGINT as DuckDB casts (`::BIGINT`): to the nearest integer, halves to even
    (C's `nearbyint`: 2.5 → 2, 3.5 → 4, -2.5 → -2), so `np.rint`. Where DuckDB's cast raises
    (±inf, NaN, a value outside [-2**63, 2**63)), ValueError naming `what` and the value."""
    x = np.asarray(x, dtype=np.float64)
    inside = (x >= -_BIGINT_END) & (x < _BIGINT_END)  # False for NaN and ±inf
    if not inside.all():
        bad = float(x[~inside][0])
        raise ValueError(f"{what} value {bad!r} is out of range for BIGINT")
    ints: np.ndarray = np.rint(x).astype(np.int64)
    return ints


# frame column → gpu metric averaged over the interval (analyze.schema.MEAN_COLUMNS)
MEANS: tuple[tuple[str, str], ...] = (
    ("duty", "gpu_util_ratio"),
    ("mem_copy", "mem_copy_util_ratio"),
    ("graphics_active", "graphics_active_ratio"),
    ("sm_active", "sm_active_ratio"),
    ("sm_occupancy", "sm_occupancy_ratio"),
    ("tensor_active", "tensor_active_ratio"),
    ("dram_active", "dram_active_ratio"),
    ("fp32_active", "fp32_active_ratio"),
    ("fp16_active", "fp16_active_ratio"),
    ("fp64_active", "fp64_active_ratio"),
    ("pcie_rx_bps", "pcie_rx_bytes_per_second"),
    ("pcie_tx_bps", "pcie_tx_bytes_per_second"),
    ("sm_clock_hz", "sm_clock_hertz"),
    ("power_w", "power_watts"),
    ("temperature_c", "temperature_celsius"),
)
GPU_AGGS: tuple[Agg, ...] = (
    Agg("gpu_index", ANY),
    Agg("gpu_model", ANY),
    Agg("parent_uuid", ANY),
    Agg("mig_profile", ANY),
    Agg("samples", COUNT, "*"),
    Agg("ts_first", MIN, "epoch_ns(ts)", lambda c: c("ts")),
    Agg("ts_last", MAX, "epoch_ns(ts)", lambda c: c("ts")),
    *(Agg(c, MEAN, m) for c, m in MEANS),
    Agg("sm_active_min", MIN, "sm_active_ratio"),
    Agg("sm_active_max", MAX, "sm_active_ratio"),
    Agg("duty_min", MIN, "gpu_util_ratio"),
    Agg("sm_clock_max_hz", MAX, "sm_clock_max_hertz"),
    Agg("power_limit_w", MAX, "power_limit_watts"),
    Agg("memory_total_bytes", MAX),
    Agg("memory_used_bytes", MAX),
    Agg("memory_used_first", FIRST, "memory_used_bytes"),
    Agg("memory_used_last", LAST, "memory_used_bytes"),
    # nvlink_bps = rx + tx, null when neither was measured (the output expression)
    Agg("nvlink_rx", MEAN, "nvlink_rx_bytes_per_second"),
    Agg("nvlink_tx", MEAN, "nvlink_tx_bytes_per_second"),
    # the energy counter only grows: first and last are its min and max (frames._series_sql)
    Agg("e_first", MIN, "energy_joules"),
    Agg("e_last", MAX, "energy_joules"),
    Agg(
        "throttle_power",
        MEAN,
        f"coalesce(throttle_power_ratio, {_throttle(POWER_REASON_BITS)})",
        lambda c: _coalesce(c("throttle_power_ratio"), _throttle_np(c, POWER_REASON_BITS)),
    ),
    Agg(
        "throttle_thermal",
        MEAN,
        f"coalesce(throttle_thermal_ratio, {_throttle(THERMAL_REASON_BITS)})",
        lambda c: _coalesce(c("throttle_thermal_ratio"), _throttle_np(c, THERMAL_REASON_BITS)),
    ),
    Agg(  # GPU_IDLE (0x1)
        "clock_idle",
        MEAN,
        "(clocks_event_reasons::BIGINT & 1)::DOUBLE",
        lambda c: _throttle_np(c, 1),
    ),
    Agg("ecc_dbe_total", MAX, "ecc_dbe_volatile_total"),
    Agg("xid_last", MAX, "xid_last"),
)
PROCESS_AGGS: tuple[Agg, ...] = (
    *(Agg(c, ANY) for c in ATTRIBUTION_LABELS),
    Agg("mem", MAX, "process_memory_used_bytes"),
)
HOST_AGGS: tuple[Agg, ...] = (
    Agg("host_cpu", MEAN, "host_cpu_util_ratio"),
    Agg("host_iowait", MEAN, "host_cpu_iowait_ratio"),
)
APP_AGGS: tuple[Agg, ...] = (
    Agg("data_wait", MEAN, "app_data_wait_ratio"),
    Agg("tokens_per_s", MEAN, "app_tokens_per_second"),
    Agg("model_parameters", MAX, "app_model_parameters"),
    Agg("kernel_launches_per_s", MEAN, "app_kernel_launches_per_second"),
    Agg("latency_p50_s", MEAN, "app_latency_p50_seconds"),
)


@dataclass(frozen=True, slots=True)
class Part:
    """One per-bucket aggregate table: `name` (its CTE's role, and the `part` tag of its rows
    in a cache file), the raw `table`, the grouping `keys` besides the bucket, the raw rows
    that count (every column of `present` non-null, every one of `absent` null, and at least
    one of `any_present` non-null when given: `where`) and the aggregated columns."""

    name: str
    table: str
    keys: tuple[str, ...]
    aggs: tuple[Agg, ...]
    derived: tuple[Agg, ...] = ()  # computed per fine bucket after the aggregation
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    any_present: tuple[str, ...] = ()

    @property
    def merged(self) -> tuple[Agg, ...]:
        """The columns that are re-aggregated from fine buckets: `aggs` and `derived`."""
        return self.aggs + self.derived

    @property
    def where(self) -> str:
        """The row condition in SQL."""
        terms = [f"{c} IS NOT NULL" for c in self.present]
        terms += [f"{c} IS NULL" for c in self.absent]
        if self.any_present:
            terms.append("(" + " OR ".join(f"{c} IS NOT NULL" for c in self.any_present) + ")")
        return " AND ".join(terms) or "true"


# the coverage rule's columns (store/coverage.py), per fine bucket, re-aggregated upward
COVERAGE_AGGS: tuple[Agg, ...] = (
    Agg("cov_s", SUM),
    Agg("nod_s", SUM),
    Agg("tail_from", MAX),
    Agg("cap_ns", MAX),
    Agg("spacing_ns", MAX),
)
GPU = Part("gpu", "gpu", ("host", "gpu_uuid", "mig_instance"), GPU_AGGS, COVERAGE_AGGS)
PROCESS = Part(
    "process",
    "process",
    ("gpu_uuid", "pid"),
    PROCESS_AGGS,
    present=("gpu_uuid", "process_memory_used_bytes"),
)
HOST = Part("host", "host", ("host",), HOST_AGGS, any_present=tuple(a.source for a in HOST_AGGS))
# application readings for one GPU of a job, and job-wide ones (no gpu_uuid)
APP_GPU = Part("app_gpu", "app", ("job_id", "gpu_uuid"), APP_AGGS, present=("job_id", "gpu_uuid"))
APP_JOB = Part("app_job", "app", ("job_id",), APP_AGGS, present=("job_id",), absent=("gpu_uuid",))
PARTS: tuple[Part, ...] = (GPU, PROCESS, HOST, APP_GPU, APP_JOB)


# rx + tx over the interval; null when neither direction was measured
_NVLINK = (
    "CASE WHEN g.nvlink_rx IS NOT NULL OR g.nvlink_tx IS NOT NULL "
    "THEN coalesce(g.nvlink_rx, 0) + coalesce(g.nvlink_tx, 0) END"
)
# The output, in analyze.schema.ALL_COLUMNS order: (column, SQL expression over the joined
# aggregates, DuckDB type). An expression that is one aggregate (`g.x`, `pa.x`, `h.x`) or the
# per-GPU app reading with the job-wide one filling in (`coalesce(ag.x, aj.x)`) needs nothing
# more; every other one has its numpy counterpart in OUTPUT_NUMPY.
OUTPUT: tuple[tuple[str, str, str], ...] = (
    ("start_ns", "g.b * $step_ns", "BIGINT"),
    ("step_s", "$step_s", "DOUBLE"),
    ("samples", "g.samples", "BIGINT"),
    ("covered_s", "g.cov_s + g.tail_cov_ns / 1e9", "DOUBLE"),
    ("no_data_s", "g.nod_s + g.tail_nod_ns / 1e9", "DOUBLE"),
    ("host", "g.host", "VARCHAR"),
    ("gpu_uuid", "g.gpu_uuid", "VARCHAR"),
    ("gpu_index", "g.gpu_index", "VARCHAR"),
    ("gpu_model", "g.gpu_model", "VARCHAR"),
    ("mig_instance", "g.mig_instance", "VARCHAR"),
    ("parent_uuid", "g.parent_uuid", "VARCHAR"),
    ("mig_profile", "g.mig_profile", "VARCHAR"),
    *((c, f"pa.{c}", "VARCHAR") for c in PROCESS_LABELS),
    ("processes", "coalesce(pa.processes, 0)", "BIGINT"),
    *((c, f"g.{c}", "DOUBLE") for c, _ in MEANS),
    ("sm_active_min", "g.sm_active_min", "DOUBLE"),
    ("sm_active_max", "g.sm_active_max", "DOUBLE"),
    ("duty_min", "g.duty_min", "DOUBLE"),
    ("sm_clock_max_hz", "g.sm_clock_max_hz", "DOUBLE"),
    ("power_limit_w", "g.power_limit_w", "DOUBLE"),
    ("memory_total_bytes", "g.memory_total_bytes", "DOUBLE"),
    ("memory_used_bytes", "g.memory_used_bytes", "DOUBLE"),
    ("memory_used_first", "g.memory_used_first", "DOUBLE"),
    ("memory_used_last", "g.memory_used_last", "DOUBLE"),
    ("process_memory_bytes", "pa.process_memory_bytes", "DOUBLE"),
    ("nvlink_bps", _NVLINK, "DOUBLE"),
    ("energy_j", "g.energy_j", "DOUBLE"),
    ("energy_power_j", "g.power_w * (g.cov_s + g.tail_cov_ns / 1e9)", "DOUBLE"),
    ("throttle_power", "g.throttle_power", "DOUBLE"),
    ("throttle_thermal", "g.throttle_thermal", "DOUBLE"),
    ("clock_idle", "g.clock_idle", "DOUBLE"),
    ("host_cpu", "h.host_cpu", "DOUBLE"),
    ("host_iowait", "h.host_iowait", "DOUBLE"),
    *((a.name, f"coalesce(ag.{a.name}, aj.{a.name})", "DOUBLE") for a in APP_AGGS),
    ("ecc_dbe_total", "g.ecc_dbe_total", "DOUBLE"),
    ("xid_last", "g.xid_last", "DOUBLE"),
)
COLUMNS: tuple[str, ...] = tuple(c for c, _, _ in OUTPUT)


def _or_zero(v: Joined, name: str) -> np.ndarray:
    """`coalesce(name, 0)`: a NaN value stays NaN, an infinite one infinite."""
    return np.where(v.null(name), 0.0, v(name))


#: OUTPUT's computed expressions in numpy, over the joined aggregates
OUTPUT_NUMPY: Mapping[str, Callable[[Joined], np.ndarray]] = {
    "start_ns": lambda v: v("g.b") * v("$step_ns"),
    "step_s": lambda v: np.full(len(v("g.b")), v("$step_s"), dtype=np.float64),
    "covered_s": lambda v: v("g.cov_s") + v("g.tail_cov_ns") / 1e9,
    "no_data_s": lambda v: v("g.nod_s") + v("g.tail_nod_ns") / 1e9,
    "processes": lambda v: _or_zero(v, "pa.processes"),
    "nvlink_bps": lambda v: _or_zero(v, "g.nvlink_rx") + _or_zero(v, "g.nvlink_tx"),
    "energy_power_j": lambda v: v("g.power_w") * (v("g.cov_s") + v("g.tail_cov_ns") / 1e9),
}
#: where OUTPUT_NUMPY's columns are null, for those that are not simply null where one of the
#: values they read is (SQL arithmetic): a `coalesce` or a `CASE`
OUTPUT_NULLS: Mapping[str, Callable[[Joined], np.ndarray]] = {
    "processes": lambda v: np.zeros(len(v("g.b")), dtype=bool),
    "nvlink_bps": lambda v: v.null("g.nvlink_rx") & v.null("g.nvlink_tx"),
}
