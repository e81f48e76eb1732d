"""Waste and price: per-row accounting against plain arithmetic, and the cause summary."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analyze import waste
from gpulens.analyze.prices import Prices
from gpulens.analyze.schema import STATES

H100 = "NVIDIA H100 80GB HBM3"
T4 = "Tesla T4"
PRICES = Prices(
    gpu_hour={"H100": 4.0, "T4": 0.5}, unknown_gpu_hour=1.0, pue=1.5, electricity_per_kwh=0.2
)


def frame(rows: list[dict[str, Any]]) -> pa.Table:
    cols = (
        "start_ns",
        "step_s",
        "gpu_uuid",
        "gpu_model",
        "pid",
        "user",
        "state",
        "useful_ratio",
        "sm_active",
        "energy_j",
        "energy_power_j",
        "mig_instance",
        "parent_uuid",
    )
    types = {
        "start_ns": pa.int64(),
        "step_s": pa.float64(),
        "useful_ratio": pa.float64(),
        "sm_active": pa.float64(),
        "energy_j": pa.float64(),
        "energy_power_j": pa.float64(),
    }
    return pa.table(
        {c: pa.array([r.get(c) for r in rows], types.get(c, pa.string())) for c in cols}
    )


def row(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "start_ns": 0,
        "step_s": 3600.0,
        "gpu_uuid": "g0",
        "gpu_model": H100,
        "pid": "1",
        "user": "ann",
    }
    base.update(kw)
    return base


def col(t: pa.Table, name: str) -> list[Any]:
    return list(t[name].to_pylist())


def test_rows_against_hand_arithmetic() -> None:
    t = waste.annotate(
        frame(
            [
                row(state="compute_tensor", useful_ratio=0.6, energy_j=1.8e6),  # 0.5 kWh
                row(
                    gpu_uuid="g1", state="idle_allocated", useful_ratio=0.4, energy_power_j=3.6e5
                ),  # 0.1 kWh, by power
                row(gpu_uuid="g2", gpu_model=T4, pid=None, user=None, state="idle_unallocated"),
                row(gpu_uuid="g3", state="warmup", useful_ratio=0.2),
                row(gpu_uuid="g4", gpu_model="mystery", state="hollow_busy", sm_active=0.25),
                row(gpu_uuid="g5", state="busy"),  # duty-cycle tier: no useful ratio
            ]
        ),
        PRICES,
        "fr",
    )
    assert col(t, "allocated_s") == [3600.0, 3600.0, 0.0, 3600.0, 3600.0, 3600.0]
    assert col(t, "useful_s") == pytest.approx([2160.0, 0.0, 0.0, 0.0, 900.0, None])
    # compute_tensor is healthy: its not-useful 40 % is headroom, not waste
    assert col(t, "wasted_s")[:5] == pytest.approx([0.0, 3600.0, 0.0, 0.0, 2700.0])
    assert col(t, "wasted_s")[5] is None  # unknown, never 0
    assert col(t, "headroom_s") == pytest.approx([1440.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert col(t, "warmup_s") == [0.0, 0.0, 0.0, 3600.0, 0.0, 0.0]
    assert col(t, "unmeasured_s") == [0.0, 0.0, 0.0, 0.0, 0.0, 3600.0]
    assert col(t, "waste_cause") == [
        "compute_tensor",
        "idle_allocated",
        "idle_unallocated",
        "warmup",
        "hollow_busy",
        "busy",
    ]
    assert col(t, "energy_method") == ["counter", "power_integral", None, None, None, None]
    assert col(t, "energy_kwh")[:2] == pytest.approx([0.5, 0.1])
    assert col(t, "price_per_gpu_hour") == [4.0, 4.0, 0.5, 4.0, 1.0, 4.0]
    assert col(t, "cost") == pytest.approx([4.0, 4.0, 0.5, 4.0, 1.0, 4.0])
    # energy cost: kWh × PUE 1.5 × 0.2/kWh; carbon: kWh × 1.5 × 56 g (France)
    assert col(t, "energy_cost")[:2] == pytest.approx([0.15, 0.03])
    assert col(t, "total_cost")[:3] == pytest.approx([4.15, 4.03, 0.5])
    assert col(t, "co2e_kg")[:2] == pytest.approx([0.5 * 1.5 * 0.056, 0.1 * 1.5 * 0.056])
    assert col(t, "co2e_kg")[2] is None


def test_waste_by_cause_is_a_complete_account() -> None:
    f = frame(
        [
            row(state="compute_tensor", useful_ratio=0.75, energy_j=3.6e6),
            row(gpu_uuid="g1", state="idle_allocated", energy_j=3.6e6),
            row(gpu_uuid="g2", pid=None, user=None, state="idle_unallocated"),
            row(gpu_uuid="g3", state="idle_allocated", step_s=1800.0),
        ]
    )
    summary = {(r["kind"], r["cause"]): r for r in waste.waste_by_cause(f, PRICES).to_pylist()}
    assert summary[("wasted", "idle_allocated")]["gpu_hours"] == pytest.approx(1.5)
    assert ("wasted", "compute_tensor") not in summary  # healthy: headroom, not waste
    assert summary[("headroom", "compute_tensor")]["gpu_hours"] == pytest.approx(0.25)
    assert summary[("useful", "useful")]["gpu_hours"] == pytest.approx(0.75)
    assert summary[("unallocated", "idle_unallocated")]["gpu_hours"] == pytest.approx(1.0)
    assert sum(r["gpu_hours"] for r in summary.values()) == pytest.approx(3.5)
    assert sum(r["share"] for r in summary.values()) == pytest.approx(1.0)
    # idle_allocated: 1 h + 0.5 h of H100 at 4.0, plus 1 kWh × 1.5 × 0.2 on the first row
    assert summary[("wasted", "idle_allocated")]["total_cost"] == pytest.approx(6.0 + 0.3)
    assert summary[("wasted", "idle_allocated")]["energy_kwh"] == pytest.approx(1.0)
    assert summary[("headroom", "compute_tensor")]["energy_kwh"] == pytest.approx(0.25)
    assert summary[("headroom", "compute_tensor")]["co2e_kg"] == pytest.approx(0.25 * 1.5 * 0.475)
    assert summary[("headroom", "compute_tensor")]["total_cost"] == pytest.approx(
        0.25 * 4.0 + 0.25 * 0.3
    )  # priced: its share of the H100 hour and of 1 kWh × 1.5 × 0.2
    ordered = waste.waste_by_cause(f, PRICES).to_pylist()
    assert (ordered[0]["kind"], ordered[0]["cause"]) == ("wasted", "idle_allocated")
    assert [r["kind"] for r in ordered] == ["wasted", "headroom", "unallocated", "useful"]


def test_headroom_is_ranked_after_every_waste_cause() -> None:
    """Large headroom never outranks a small actionable waste (issue 12: a healthy training
    job's remainder is not the fleet's worst waste)."""
    f = frame(
        [
            row(state="compute_tensor", useful_ratio=0.1),  # 0.9 h of headroom
            row(gpu_uuid="g1", state="idle_allocated", step_s=360.0),  # 0.1 h of waste
            row(gpu_uuid="g2", state="busy", useful_ratio=0.5),  # busy stays waste
        ]
    )
    ordered = waste.waste_by_cause(f, PRICES).to_pylist()
    kinds = [(r["kind"], r["cause"]) for r in ordered]
    assert kinds.index(("wasted", "idle_allocated")) < kinds.index(("headroom", "compute_tensor"))
    assert kinds.index(("wasted", "busy")) < kinds.index(("headroom", "compute_tensor"))
    assert {r["kind"] for r in ordered} <= set(waste.KINDS)
    assert set(waste.HEADROOM_CAUSES).isdisjoint(waste.WASTE_CAUSES)


def test_unmeasured_healthy_rows_have_no_headroom_either() -> None:
    t = waste.annotate(frame([row(state="compute_tensor")]))  # no useful ratio, no sm_active
    assert col(t, "useful_s") == [None]
    assert col(t, "wasted_s") == [None] and col(t, "headroom_s") == [None]
    assert col(t, "unmeasured_s") == [3600.0]


def test_mig_instances_share_their_parent() -> None:
    f = frame(
        [
            row(gpu_uuid="GPU-p", state="idle_unallocated", pid=None, energy_j=3.6e6),
            row(
                gpu_uuid="MIG-a",
                gpu_model="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                mig_instance="1",
                parent_uuid="GPU-p",
                state="compute_tensor",
                useful_ratio=1.0,
            ),
            row(
                gpu_uuid="MIG-b", mig_instance="2", parent_uuid="GPU-p", state="idle_allocated"
            ),  # no profile known: 1/7
        ]
    )
    t = waste.annotate(f, PRICES)
    assert col(t, "gpu_share") == pytest.approx([0.0, 3 / 7, 1 / 7])
    assert col(t, "cost") == pytest.approx([0.0, 4.0 * 3 / 7, 4.0 / 7])
    assert col(t, "energy_kwh")[0] == pytest.approx(1.0)  # device energy stays on the parent


def test_without_state_allocation_comes_from_the_process() -> None:
    f = frame([row(sm_active=0.5), row(gpu_uuid="g1", pid=None)]).drop_columns(["state"])
    t = waste.annotate(f)
    assert col(t, "allocated_s") == [3600.0, 0.0]
    assert col(t, "useful_s") == [1800.0, 0.0]
    assert col(t, "waste_cause") == ["other", "idle_unallocated"]


def test_empty_frame() -> None:
    t = waste.annotate(frame([]))
    assert t.num_rows == 0 and set(waste.ANNOTATION_COLUMNS) <= set(t.column_names)
    assert waste.waste_by_cause(frame([])).num_rows == 0


def test_annotate_is_idempotent() -> None:
    f = frame([row(state="compute_fp32", useful_ratio=0.3)])
    once = waste.annotate(f)
    assert waste.annotate(once).equals(once)
    assert waste.ensure_annotated(once) is once


ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "gpu_uuid": st.sampled_from(["a", "b", "c"]),
            "step_s": st.sampled_from([10.0, 60.0, 300.0]),
            "state": st.sampled_from([*STATES, None]),
            "useful_ratio": st.one_of(st.none(), st.floats(-0.5, 1.5)),
            "pid": st.sampled_from(["1", None]),
            "energy_j": st.one_of(st.none(), st.floats(0, 1e6)),
        }
    ),
    max_size=40,
)


@given(ROWS)
@settings(max_examples=60, deadline=None)
def test_accounting_identities(rows: list[dict[str, Any]]) -> None:
    t = waste.annotate(frame([row(**r) for r in rows]))
    for r in t.to_pylist():
        parts = [r["useful_s"], r["wasted_s"], r["headroom_s"]]
        known = sum(p for p in parts if p is not None)
        assert (
            r["wasted_s"] is None
            or r["headroom_s"] is None
            or (r["wasted_s"] == 0.0 or r["headroom_s"] == 0.0)
        )  # a row's not-useful time is one kind or the other
        assert known + r["warmup_s"] + r["unmeasured_s"] == pytest.approx(r["allocated_s"])
        assert 0.0 <= r["allocated_s"] <= r["gpu_s"]
        assert (r["useful_s"] is None) == (r["unmeasured_s"] > 0)
    summary = waste.waste_by_cause(t)
    total_h = sum(r["gpu_s"] for r in t.to_pylist()) / 3600.0
    assert sum(summary["gpu_hours"].to_pylist()) == pytest.approx(total_h)
