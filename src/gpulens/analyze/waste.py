"""Waste and price: GPU-seconds split into useful, wasted (by cause), headroom, warm-up and
unmeasured, with energy, money and carbon per interval. Pure: tables in, tables out.

`annotate(frame)` adds, per row of a classified interval frame (see `schema`; `state` from
`efficiency.classify`):

- `gpu_share`: the fraction of a physical GPU the row stands for: 1 for a whole GPU, `g/7`
  for a MIG instance with a "<g>g.<mem>gb" profile (in a `mig_profile` column or the model
  name; `g/4` on an A30; 1/7 when the profile is unknown), and 0 for a MIG-enabled parent GPU
  whose instances are rows of the same frame (the instances carry its time; never twice).
- `gpu_s` = `covered_s × gpu_share`: capacity, the time the row's readings stand for (see
  `schema`; `step_s` in a frame without `covered_s`). A lone snapshot covers 0 s: no
  GPU-hours, no cost. `no_data_gpu_s` = the frame's `no_data_s × gpu_share` (0 without
  the column): gaps beyond the maximum gap, outside capacity, neither allocated nor
  unallocated.
- `allocated_s`: `gpu_s` when a process holds the GPU, i.e. `state` is set and is not
  `idle_unallocated` (without a state, or with state `unknown`: a `pid` or `processes > 0`),
  else 0.
- `useful_s` = `allocated_s × useful_ratio`. The ratio is the frame's `useful_ratio` (from
  `efficiency`), else `sm_active` (profiling tier fallback: SM activity is the best single
  proxy of useful work, DCGM guidance), clipped to [0, 1]. `idle_allocated` is never useful.
- `waste_cause` (dictionary-encoded string, as is `energy_method`) = the state (the state is
  the cause); a state outside `WASTE_CAUSES` and `HEADROOM_CAUSES` (or none) counts as "other".
  The not-useful time `allocated_s − useful_s` is either actionable waste or headroom:
  `wasted_s` in the states a finding acts on (`WASTE_CAUSES`), `headroom_s` in the healthy
  states (`HEADROOM_STATES`: `compute_tensor`, where the GPU already does the work it was
  built for; the next gains come from kernel-level tuning, which no finding proposes). The
  other of the two is 0. See docs/analysis/waste-and-fairness.md.
- `warmup_s`: allocated time in the `warmup` state. Warm-up is excluded from waste and from
  useful work and reported on its own (a job cannot skip its start-up).
- `unmeasured_s`: allocated time whose useful ratio is unknown (no `useful_ratio`, no
  `sm_active`: duty-cycle-only tier). Its `useful_s` and `wasted_s` (`headroom_s` in a
  healthy state) are null, never 0.
- `energy_kwh` and `energy_method`: the energy counter delta (`energy_j`, "counter") where
  present, else power × time (`energy_power_j`, "power_integral"), else null. Energy is that
  of the device the row measures and is not scaled by `gpu_share`.
- `price_per_gpu_hour`, `cost` = price × `gpu_s` / 3600 (the GPU-hour price share; on cloud it
  includes electricity), `energy_cost` = kWh × PUE × electricity price (0 by default),
  `total_cost` = `cost + energy_cost`, `co2e_kg` = kWh × PUE × grid gCO2e/kWh / 1000.

For every row `useful_s + wasted_s + headroom_s + warmup_s + unmeasured_s = allocated_s ≤
gpu_s`, and
`gpu_s − allocated_s` is unallocated capacity (cause `idle_unallocated`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.analyze.carbon import DEFAULT_REGION, g_per_kwh
from gpulens.analyze.prices import Prices, mig_slices, model_tokens
from gpulens.analyze.schema import STATES

#: healthy states: their not-useful remainder is headroom, not waste. `busy` is not one of them:
#: it says only that kernels ran (no pipe stands out), `low_tensor_use` acts on it, and calling
#: it healthy would hide time nobody has explained.
HEADROOM_STATES: tuple[str, ...] = ("compute_tensor",)
HEADROOM_CAUSES: tuple[str, ...] = HEADROOM_STATES
WASTE_CAUSES: tuple[str, ...] = tuple(
    dict.fromkeys(
        [
            *(s for s in STATES if s not in ("idle_unallocated", "warmup", *HEADROOM_STATES)),
            "busy",
            "other",
        ]
    )
)
KINDS: tuple[str, ...] = ("useful", "wasted", "headroom", "warmup", "unmeasured", "unallocated")
#: what headroom means, for every place that shows it
HEADROOM_NOTE = (
    "headroom: the not-useful remainder of intervals in healthy states (compute_tensor); "
    "already efficient; the next gains come from kernel-level tuning. Not ranked as waste."
)
ANNOTATION_COLUMNS: tuple[str, ...] = (
    "gpu_share",
    "gpu_s",
    "no_data_gpu_s",
    "allocated_s",
    "useful_s",
    "wasted_s",
    "headroom_s",
    "waste_cause",
    "warmup_s",
    "unmeasured_s",
    "energy_kwh",
    "energy_method",
    "price_per_gpu_hour",
    "cost",
    "energy_cost",
    "total_cost",
    "co2e_kg",
)
J_PER_KWH = 3.6e6
CAUSE_NAMES: tuple[str, ...] = (*WASTE_CAUSES, *HEADROOM_CAUSES, "idle_unallocated", "warmup")
_CAUSE_INDEX = {c: i for i, c in enumerate(CAUSE_NAMES)}


def _labels(indices: np.ndarray, names: tuple[str, ...]) -> pa.Array:
    """A dictionary<int8, string> column from indices into `names` (−1 → null)."""
    idx = pa.array(indices.astype(np.int8), mask=indices < 0)
    return pa.DictionaryArray.from_arrays(idx, pa.array(names))


def _floats(frame: pa.Table, name: str) -> np.ndarray:
    """A column as float64 numpy with NaN for null (all NaN when the column is absent)."""
    if name not in frame.column_names:
        return np.full(frame.num_rows, np.nan)
    col = pc.cast(frame[name], pa.float64())
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def _strings(frame: pa.Table, name: str) -> tuple[np.ndarray, list[str | None]]:
    """Dictionary codes (−1 for null or absent) and the dictionary of a string column."""
    if name not in frame.column_names or frame.num_rows == 0:
        return np.full(frame.num_rows, -1, dtype=np.int64), []
    enc = pc.dictionary_encode(frame[name]).combine_chunks()
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, enc.dictionary.to_pylist()


def _gpu_share(frame: pa.Table) -> np.ndarray:
    n = frame.num_rows
    share = np.ones(n)
    cols = frame.column_names
    is_mig = np.zeros(n, dtype=bool)
    for name in ("mig_instance", "parent_uuid"):
        if name in cols:
            is_mig |= frame[name].is_valid().to_numpy(zero_copy_only=False)
    if is_mig.any():
        model_codes, models = _strings(frame, "gpu_model")
        prof_codes, profiles = _strings(frame, "mig_profile")
        for idx in np.flatnonzero(is_mig):
            mc, pcode = model_codes[idx], prof_codes[idx]
            model = models[mc] if mc >= 0 else None
            slices = mig_slices(profiles[pcode] if pcode >= 0 else None) or mig_slices(model)
            whole = 4 if model is not None and "A30" in model_tokens(model) else 7
            share[idx] = min(slices, whole) / whole if slices else 1.0 / 7.0
    if "parent_uuid" in cols and "gpu_uuid" in cols:
        parents = pc.unique(frame["parent_uuid"].drop_null())
        if len(parents):
            is_parent = pc.is_in(frame["gpu_uuid"], value_set=parents).fill_null(False)
            share[is_parent.to_numpy(zero_copy_only=False) & ~is_mig] = 0.0
    return share


def covered(frame: pa.Table) -> np.ndarray:
    """Per row, the seconds its readings cover: `covered_s` where the frame has it (null counts
    as `step_s`), else `step_s`; NaN as 0."""
    step = np.asarray(np.nan_to_num(_floats(frame, "step_s"), nan=0.0), dtype=np.float64)
    if "covered_s" not in frame.column_names:
        return step
    cover = _floats(frame, "covered_s")
    return np.asarray(np.where(np.isnan(cover), step, cover), dtype=np.float64)


def annotate(
    frame: pa.Table, prices: Prices | None = None, region: str | float = DEFAULT_REGION
) -> pa.Table:
    """The frame with ANNOTATION_COLUMNS added (replaced if present); see the module doc."""
    prices = prices or Prices()
    grid = g_per_kwh(region)
    n = frame.num_rows
    share = _gpu_share(frame)
    gpu_s = covered(frame) * share
    no_data_s = np.nan_to_num(_floats(frame, "no_data_s"), nan=0.0) * share

    codes, names = _strings(frame, "state")
    state_idx = {s: i for i, s in enumerate(names) if s is not None}
    has_state = "state" in frame.column_names

    def is_state(name: str) -> np.ndarray:
        i = state_idx.get(name)
        return codes == i if i is not None else np.zeros(n, dtype=bool)

    if has_state:
        fallback = _floats(frame, "processes") > 0
        if "pid" in frame.column_names:
            fallback |= frame["pid"].is_valid().to_numpy(zero_copy_only=False)
        known = (codes >= 0) & ~is_state("unknown")
        allocated = np.where(known, ~is_state("idle_unallocated"), fallback)
    else:
        allocated = _floats(frame, "processes") > 0
        if "pid" in frame.column_names:
            allocated |= frame["pid"].is_valid().to_numpy(zero_copy_only=False)
    allocated_s = np.where(allocated, gpu_s, 0.0)

    warm = allocated & is_state("warmup")
    productive = allocated & ~warm
    ratio = np.array(_floats(frame, "useful_ratio"))  # a writable copy
    missing = np.isnan(ratio)
    if missing.any():
        ratio[missing] = _floats(frame, "sm_active")[missing]
    np.clip(ratio, 0.0, 1.0, out=ratio)
    ratio[is_state("idle_allocated")] = 0.0
    ratio[~productive] = 0.0  # unallocated and warm-up rows: neither useful nor wasted
    unknown = np.isnan(ratio)  # productive rows without a useful ratio
    useful_s = allocated_s * ratio  # NaN exactly where unknown
    not_useful = np.where(warm, 0.0, allocated_s) - useful_s
    healthy = np.zeros(n, dtype=bool)
    for name in HEADROOM_STATES:
        healthy |= is_state(name)
    healthy &= productive
    headroom_s = np.where(healthy, not_useful, 0.0)  # NaN where unknown, as useful_s
    wasted_s = np.where(healthy & ~unknown, 0.0, not_useful)

    # cause index into CAUSE_NAMES: the state where it is a cause, else "other"
    cause_of_code = np.array(
        [_CAUSE_INDEX.get(str(s), _CAUSE_INDEX["other"]) for s in names] + [_CAUSE_INDEX["other"]],
        dtype=np.int8,
    )
    cause = cause_of_code[codes]  # code −1 → the trailing "other"
    cause[~allocated] = _CAUSE_INDEX["idle_unallocated"]
    cause[warm] = _CAUSE_INDEX["warmup"]

    counter = _floats(frame, "energy_j")
    has_counter = ~np.isnan(counter)
    if has_counter.all():
        kwh, method = counter / J_PER_KWH, np.zeros(n, dtype=np.int8)
    else:
        integral = _floats(frame, "energy_power_j")
        kwh = np.where(has_counter, counter, integral) / J_PER_KWH
        method = np.where(has_counter, 0, np.where(np.isnan(integral), -1, 1)).astype(np.int8)

    model_codes, models = _strings(frame, "gpu_model")
    model_prices = np.array([prices.gpu_hour_price(m) for m in models] + [prices.unknown_gpu_hour])
    price = model_prices[model_codes]
    cost = (model_prices / 3600.0)[model_codes] * gpu_s
    energy_cost = kwh * (prices.pue * prices.electricity_per_kwh)
    total_cost = cost + np.nan_to_num(energy_cost, nan=0.0, copy=True)
    co2e = kwh * (prices.pue * grid / 1000.0)

    def arr(values: np.ndarray) -> pa.Array:
        return pa.array(values, type=pa.float64(), from_pandas=True)  # NaN → null

    new: dict[str, pa.Array] = {
        "gpu_share": pa.array(share),
        "gpu_s": pa.array(gpu_s),
        "no_data_gpu_s": pa.array(no_data_s),
        "allocated_s": pa.array(allocated_s),
        "useful_s": arr(useful_s),
        "wasted_s": arr(wasted_s),
        "headroom_s": arr(headroom_s),
        "waste_cause": _labels(cause, CAUSE_NAMES),
        "warmup_s": pa.array(np.where(warm, allocated_s, 0.0)),
        "unmeasured_s": pa.array(np.where(unknown, allocated_s, 0.0)),
        "energy_kwh": arr(kwh),
        "energy_method": _labels(method, ("counter", "power_integral")),
        "price_per_gpu_hour": pa.array(price, type=pa.float64()),
        "cost": pa.array(cost, type=pa.float64()),
        "energy_cost": arr(energy_cost),
        "total_cost": pa.array(total_cost, type=pa.float64()),
        "co2e_kg": arr(co2e),
    }
    out = frame
    for name, values in new.items():
        if name in out.column_names:
            out = out.drop_columns([name])
        out = out.append_column(name, values)
    return out


def ensure_annotated(
    frame: pa.Table, prices: Prices | None = None, region: str | float = DEFAULT_REGION
) -> pa.Table:
    """`frame` as is when it already carries the annotation columns, else `annotate(frame)`."""
    if all(c in frame.column_names for c in ANNOTATION_COLUMNS):
        return frame
    return annotate(frame, prices, region)


def waste_by_cause(
    frame: pa.Table, prices: Prices | None = None, region: str | float = DEFAULT_REGION
) -> pa.Table:
    """GPU-hours, cost, kWh and CO2e per (cause, kind), a complete account of capacity.

    Kinds (`KINDS`): "useful" (cause "useful"), "wasted" (cause = a state of `WASTE_CAUSES`),
    "headroom" (cause = a state of `HEADROOM_CAUSES`), "warmup", "unmeasured" (cause
    "unmeasured") and "unallocated" (cause "idle_unallocated"). Each row's money, energy and
    carbon are split over its kinds in proportion to GPU-seconds. The `gpu_hours` column sums
    to the frame's total GPU-hours; `share` is of that total. Sorted by kind (wasted, then
    headroom, unallocated, unmeasured, warm-up, useful), largest first within a kind: the
    ranking of waste causes is the "wasted" rows, and headroom never enters it.
    """
    t = ensure_annotated(frame, prices, region)
    gpu_s = _floats(t, "gpu_s")
    parts: list[tuple[str, str, np.ndarray]] = [
        ("useful", "useful", np.nan_to_num(_floats(t, "useful_s"))),
        ("wasted", "", np.nan_to_num(_floats(t, "wasted_s"))),
        ("headroom", "", np.nan_to_num(_floats(t, "headroom_s"))),
        ("warmup", "warmup", _floats(t, "warmup_s")),
        ("unmeasured", "unmeasured", _floats(t, "unmeasured_s")),
        ("unallocated", "idle_unallocated", gpu_s - _floats(t, "allocated_s")),
    ]
    cause_codes, causes = _strings(t, "waste_cause")
    per_row = {
        "cost": _floats(t, "cost"),
        "energy_kwh": _floats(t, "energy_kwh"),
        "energy_cost": _floats(t, "energy_cost"),
        "total_cost": _floats(t, "total_cost"),
        "co2e_kg": _floats(t, "co2e_kg"),
    }
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = np.where(gpu_s > 0, 1.0 / gpu_s, 0.0)
    rows: list[dict[str, object]] = []
    total_h = float(gpu_s.sum()) / 3600.0
    by_kind = {"wasted": WASTE_CAUSES, "headroom": HEADROOM_CAUSES}
    for kind, cause, seconds in parts:
        groups = (
            [(c, cause_codes == i) for i, c in enumerate(causes) if c in by_kind[kind]]
            if kind in by_kind
            else [(cause, np.ones(len(seconds), dtype=bool))]
        )
        for name, mask in groups:
            sec = np.where(mask, seconds, 0.0)
            hours = float(sec.sum()) / 3600.0
            if hours <= 0.0:
                continue
            frac = sec * inv
            row: dict[str, object] = {"cause": name, "kind": kind, "gpu_hours": hours}
            row["share"] = hours / total_h if total_h > 0 else None
            for col, values in per_row.items():
                valid = ~np.isnan(values) & (frac > 0)
                row[col] = float(np.sum(values[valid] * frac[valid])) if valid.any() else None
            rows.append(row)
    ranks = ("wasted", "headroom", "unallocated", "unmeasured", "warmup")
    order = {k: i for i, k in enumerate(ranks)}
    rows.sort(key=lambda r: (order.get(str(r["kind"]), 9), -float(r["gpu_hours"])))  # type: ignore[arg-type]
    schema = pa.schema(
        [("cause", pa.string()), ("kind", pa.string()), ("gpu_hours", pa.float64())]
        + [(c, pa.float64()) for c in ("share", *per_row)]
    )
    return pa.Table.from_pylist(rows, schema=schema)
