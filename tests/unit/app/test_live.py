"""The live state: every simulated scenario's GPU shows its ground-truth state, waste is
counted once per closed interval, and snapshots are plain copies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from present.sim import NS, START, fleet, ticks

from gpulens.app.live import LiveState, gpu_key
from gpulens.model import Kind


@pytest.fixture(scope="module")
def fed() -> tuple[LiveState, list[dict[str, object]]]:
    sim = fleet(hosts=3, gpus_per_host=4, seed=0)
    truth = sim.ground_truth()
    steady = max(int(j["warmup"][1]) for j in truth if j.get("warmup")) - START
    first = (steady // NS // 60 + 1) * 60  # the first whole minute after every warm-up
    live = LiveState(state_window_s=60, keep_s=300)
    for tick in ticks(sim, first, first + 125):
        live.on_tick(tick)
    live.refresh()
    return live, truth


def test_every_scenario_gpu_shows_its_state(fed: tuple[LiveState, list[dict[str, object]]]) -> None:
    live, truth = fed
    by_uuid = {g.labels["gpu_uuid"]: g for g in live.snapshot().gpus}
    checked = 0
    for job in truth:
        gpus = job.get("gpus") or [
            {"uuid": u, "expected_state": job["expected_state"]}
            for u in job["gpu_uuids"]  # type: ignore[attr-defined]
        ]
        for gpu in gpus:  # type: ignore[attr-defined]
            now = by_uuid[gpu["uuid"]]
            assert now.state == gpu["expected_state"], (job["scenario"], now.reason)
            if job["pids"]:
                assert now.attribution.get("job_id") == job["job_id"]
            checked += 1
    assert checked >= 9
    assert len(by_uuid) == 12


def test_useful_work_is_a_ratio(fed: tuple[LiveState, list[dict[str, object]]]) -> None:
    live, _ = fed
    ratios = [g.useful_ratio for g in live.snapshot().gpus if g.useful_ratio is not None]
    assert ratios and all(0.0 <= r <= 1.0 for r in ratios)


def test_waste_counts_closed_intervals_once() -> None:
    sim = fleet(hosts=1, gpus_per_host=4, seed=0, scenarios=["idle_allocated"])
    live = LiveState(state_window_s=60, keep_s=300)
    feed = ticks(sim, 600, 600 + 250)
    totals = []
    for i, tick in enumerate(feed):
        live.on_tick(tick)
        if i % 10 == 0:
            live.refresh()
            totals.append(sum(w.seconds for w in live.snapshot().waste))
    live.refresh()
    idle = [w for w in live.snapshot().waste if w.cause == "idle_allocated"]
    assert idle, live.snapshot().waste
    # ticks 600..849: the intervals [600, 660) ... [780, 840) closed; each idle-allocated
    # GPU wasted all 60 s of each, counted once however often refresh ran
    assert {round(w.seconds) for w in idle} == {240}
    assert totals == sorted(totals)  # a counter never goes down


def test_a_finished_jobs_waste_counter_is_forgotten() -> None:
    sim = fleet(hosts=1, gpus_per_host=4, seed=0, scenarios=["idle_allocated"])
    live = LiveState(state_window_s=60, keep_s=300, waste_forget_s=120)
    for i, tick in enumerate(ticks(sim, 600, 1080)):
        if tick.ts >= START + 780 * NS:  # the notebook's process is gone from here on
            kept = [r for r in tick.readings if r.kind is not Kind.PROCESS]
            tick = replace(tick, readings=kept)
        live.on_tick(tick)
        if i % 30 == 0:
            live.refresh()
    live.refresh()
    jobs = {w.labels.get("job_id") for w in live.snapshot().waste}
    # its last increase was over 120 s ago; the memory it left behind still counts, unowned
    assert jobs == {None}


def test_snapshot_before_any_tick_is_empty() -> None:
    snap = LiveState().snapshot()
    assert snap.ts is None and snap.gpus == [] and snap.waste == [] and snap.findings == []
    assert LiveState().refresh() is None


def test_gpu_key_treats_missing_as_empty() -> None:
    assert gpu_key({"host": "h", "gpu_uuid": "u"}) == ("h", "u", "")


def test_window_must_fit() -> None:
    with pytest.raises(ValueError, match="state_window_s"):
        LiveState(state_window_s=600, keep_s=300)
