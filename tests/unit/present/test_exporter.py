"""The exporter's /metrics text, parsed back with prometheus_client's parser, over a live state
fed with the simulated fleet's ticks (the real collectors, scheduler and rate stage)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpulens import catalog
from gpulens.app.live import GpuNow, LiveSnapshot, LiveState
from gpulens.collect.dcgm.fields import lookup
from gpulens.model import HOLDER_LABELS, Kind
from gpulens.present.prometheus import exporter
from gpulens.present.prometheus.exporter import ExporterOptions, LiveCollector

from .sim import NS, START, fleet, ticks

GPU_IDENTITY = {"gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_ID", "GPU_I_PROFILE"}
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
Families = dict[str, tuple[str, list[Sample]]]  # name → (type, samples)


@pytest.fixture(scope="module")
def state() -> Iterator[tuple[LiveSnapshot, list[dict[str, object]]]]:
    """A snapshot of the whole simulated fleet after its warm-ups, classified, and its truth."""
    sim = fleet(hosts=3, gpus_per_host=4, seed=0)
    truth = sim.ground_truth()
    steady = max(int(j["warmup"][1]) for j in truth if j.get("warmup")) - START
    first = (steady // NS // 30 + 1) * 30
    live = LiveState(state_window_s=30, keep_s=120)
    for tick in ticks(sim, first, first + 65):
        live.on_tick(tick)
    live.refresh()
    yield live.snapshot(), truth
    live.close()


def scrape(snap: LiveSnapshot, **options: bool) -> Families:
    """`generate_latest` of the exporter's registry over `snap`, parsed back."""
    registry = exporter.registry(lambda: snap, options=ExporterOptions(**options))
    return parse(generate_latest(registry).decode("utf-8"))


def parse(text: str) -> Families:
    return {f.name: (f.type, list(f.samples)) for f in text_string_to_metric_families(text)}


def samples(families: Families) -> Iterator[Sample]:
    for _, found in families.values():
        yield from found


def by_labels(families: Families, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Values of the samples named `name`, keyed by their non-empty labels."""
    return {
        tuple(sorted((k, v) for k, v in s.labels.items() if v)): s.value
        for s in samples(families)
        if s.name == name
    }


def notebook(truth: list[dict[str, object]]) -> dict[str, object]:
    return next(j for j in truth if j["scenario"] == "idle_allocated")


def test_label_names_follow_dcgm_exporter_and_attribution(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, truth = state
    families = scrape(snap)
    allowed_gpu = GPU_IDENTITY | set(HOLDER_LABELS) | {"state"}
    for s in samples(families):
        assert all(LABEL_NAME.fullmatch(k) and not k.startswith("__") for k in s.labels), s
        assert "job" not in s.labels  # Prometheus owns `job`: ours is `job_id`
        assert "pid" not in s.labels  # unbounded: only with pid_labels
    for name in ("gpulens_gpu_util_ratio", "gpulens_sm_active_ratio", "gpulens_gpu_state"):
        for s in samples(families):
            if s.name == name:
                assert set(s.labels) <= allowed_gpu, s.labels
                assert {"gpu", "UUID", "Hostname", "modelName", "device"} <= set(s.labels)
    job = notebook(truth)
    held = [
        s
        for s in samples(families)
        if s.name == "gpulens_gpu_util_ratio" and s.labels.get("job_id") == job["job_id"]
    ]
    assert len(held) == 1 and held[0].labels["user"] == job["user"]
    assert held[0].labels["UUID"] in job["gpu_uuids"]  # type: ignore[operator]
    idle = by_labels(families, "gpulens_gpu_state")
    assert any(
        dict(k).get("job_id") == job["job_id"] and dict(k)["state"] == "idle_allocated" and v == 1
        for k, v in idle.items()
    )


def test_one_state_per_gpu_and_derived_series(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, _ = state
    families = scrape(snap)
    per_gpu: dict[str, float] = {}
    for s in samples(families):
        if s.name == "gpulens_gpu_state":
            per_gpu[s.labels["UUID"]] = per_gpu.get(s.labels["UUID"], 0.0) + s.value
    assert len(per_gpu) == 12 and set(per_gpu.values()) == {1.0}
    for name in (
        "gpulens_useful_work_ratio",
        "gpulens_gpu_hour_price",
        "gpulens_wasted_gpu_seconds_total",
        "gpulens_gpu_processes",
        "gpulens_process_memory_used_bytes",
    ):
        assert by_labels(families, name), name
    assert all(0 <= v <= 1 for v in by_labels(families, "gpulens_useful_work_ratio").values())
    for s in samples(families):
        assert not s.name.startswith("gpulens_gpu_state") or s.value in (0.0, 1.0)


def test_headroom_is_its_own_series_never_waste(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    """Healthy training's not-useful remainder is headroom: exported under its own name with
    kind="headroom", never as `gpulens_wasted_gpu_seconds_total` (issue 12)."""
    families = scrape(state[0])
    wasted = [s for s in samples(families) if s.name == "gpulens_wasted_gpu_seconds_total"]
    headroom = [s for s in samples(families) if s.name == "gpulens_headroom_gpu_seconds_total"]
    assert wasted and headroom
    assert all(s.labels["kind"] == "wasted" for s in wasted)
    assert all(s.labels["kind"] == "headroom" for s in headroom)
    assert {s.labels["cause"] for s in headroom} == {"compute_tensor"}
    assert "compute_tensor" not in {s.labels["cause"] for s in wasted}
    assert "idle_allocated" in {s.labels["cause"] for s in wasted}
    assert all(s.value > 0 for s in wasted + headroom)


def test_counters_end_in_total(state: tuple[LiveSnapshot, list[dict[str, object]]]) -> None:
    families = scrape(state[0], dcgm_names=True)
    counters = [name for name, (kind, _) in families.items() if kind == "counter"]
    assert "gpulens_energy_joules" in counters and "gpulens_wasted_gpu_seconds" in counters
    for name, (kind, found) in families.items():
        for s in found:
            if kind == "counter":
                assert s.name == name + "_total", s.name
            else:
                assert not s.name.endswith("_total"), (kind, s.name)


def test_no_stale_series_after_a_process_ends(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    before, truth = state
    job = notebook(truth)
    # the notebook's process exits: the next tick has no process reading for it, and the next
    # analysis pass no attribution on its GPU
    after = replace(
        before,
        processes=[p for p in before.processes if p.labels.get("job_id") != job["job_id"]],
        gpus=[
            replace(g, attribution={}) if g.attribution.get("job_id") == job["job_id"] else g
            for g in before.gpus
        ],
    )
    snaps = iter([before, after])
    registry = exporter.registry(lambda: next(snaps))
    first = parse(generate_latest(registry).decode())
    second = parse(generate_latest(registry).decode())
    mentions = [s for s in samples(first) if s.labels.get("job_id") == job["job_id"]]
    assert {s.name for s in mentions} >= {"gpulens_gpu_processes", "gpulens_gpu_util_ratio"}
    # gauges go at once; the job's waste counter stays until an hour after its last increase
    # (test_live), so that rate() sees its last interval
    assert not [
        s
        for s in samples(second)
        if s.labels.get("job_id") == job["job_id"] and s.name != "gpulens_wasted_gpu_seconds_total"
    ]
    assert len(by_labels(second, "gpulens_gpu_util_ratio")) == 12  # the GPU itself stays
    assert len(by_labels(second, "gpulens_gpu_processes")) < len(
        by_labels(first, "gpulens_gpu_processes")
    )


def test_dcgm_names_only_with_the_option_and_in_dcgm_units(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, _ = state
    plain = scrape(snap)
    assert not [n for n in plain if n.startswith("DCGM_FI_")]
    families = scrape(snap, dcgm_names=True)
    dcgm = [n for n in families if n.startswith("DCGM_FI_")]
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_SM_CLOCK",
    } <= set(dcgm)
    checked = 0
    for name in dcgm:
        spec = lookup(name)
        assert spec is not None, name
        ours = by_labels(families, "gpulens_" + spec.metric.removesuffix("_total"))
        ours |= by_labels(families, "gpulens_" + spec.metric.removesuffix("_total") + "_total")
        for labels, value in by_labels(families, name).items():
            # the collector's conversion back to base units gives the gpulens value
            assert math.isclose(spec.convert(value), ours[labels], rel_tol=1e-9, abs_tol=1e-9)
            checked += 1
    assert checked >= 12 * len(dcgm)
    util = by_labels(families, "DCGM_FI_DEV_GPU_UTIL")
    ratio = by_labels(families, "gpulens_gpu_util_ratio")
    assert max(util.values()) > 1 and all(util[k] == pytest.approx(100 * ratio[k]) for k in util)
    fb = by_labels(families, "DCGM_FI_DEV_FB_USED")
    used = by_labels(families, "gpulens_memory_used_bytes")
    assert all(fb[k] == pytest.approx(used[k] / 2**20) for k in fb)
    mj = by_labels(families, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    joules = by_labels(families, "gpulens_energy_joules_total")
    assert all(mj[k] == pytest.approx(joules[k] * 1000) for k in mj)


#: what NVIDIA's Grafana dashboard for dcgm-exporter (grafana.com 12239) queries: the series
#: and the labels its panels filter, group and name legends by
NVIDIA_DASHBOARD_SERIES = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
)
NVIDIA_DASHBOARD_LABELS = ("Hostname", "gpu", "UUID")


def test_nvidia_dashboard_series_are_there_with_its_labels(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, _ = state
    families = scrape(snap, dcgm_names=True)
    for name in NVIDIA_DASHBOARD_SERIES:
        _, rows = families[name]
        assert len(rows) == 12, name  # every simulated GPU
        for sample in rows:
            assert all(sample.labels.get(k) for k in NVIDIA_DASHBOARD_LABELS), sample.labels
    clocks = [s.value for s in families["DCGM_FI_DEV_SM_CLOCK"][1]]
    assert all(0 < mhz < 3000 for mhz in clocks)  # MHz: the dashboard multiplies by 1e6


def test_pid_labels_only_with_the_option(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, _ = state
    with_pids = scrape(snap, pid_labels=True)
    pids = {s.labels["pid"] for s in samples(with_pids) if "pid" in s.labels}
    expected = {p.labels["pid"] for p in snap.processes if p.labels.get("pid")}
    assert pids and pids == expected


def test_exposition_is_the_same_scrape_as_generate_latest(
    state: tuple[LiveSnapshot, list[dict[str, object]]],
) -> None:
    snap, _ = state
    for options in (ExporterOptions(), ExporterOptions(dcgm_names=True, pid_labels=True)):
        collector = LiveCollector(lambda: snap, options=options)
        registry = exporter.registry(lambda: snap, options=options)
        slow = parse(generate_latest(registry).decode())
        fast_text = collector.exposition().decode()
        fast = parse(fast_text)
        assert '=""' not in fast_text  # empty labels are left out
        assert {n: kind for n, (kind, _) in fast.items()} == {
            n: kind for n, (kind, _) in slow.items()
        }
        for sample_name in {s.name for s in samples(slow)}:
            assert by_labels(fast, sample_name) == by_labels(slow, sample_name), sample_name


def test_escaping_and_missing_values() -> None:
    gpu = GpuNow(
        labels={"host": "h", "gpu_uuid": "GPU-1", "gpu_index": "0", "gpu_model": 'A "B"\\C\n'},
        values={"gpu_util_ratio": float("nan"), "sm_active_ratio": 0.5},
    )
    snap = LiveSnapshot(
        ts=START,
        gpus=[gpu],
        processes=[],
        hosts=[],
        events=[],
        collectors=[],
        waste=[],
        findings=[],
        findings_ts=None,
        state_window_s=60.0,
    )
    collector = LiveCollector(lambda: snap)
    slow = generate_latest(exporter.registry(lambda: snap))
    for text in (collector.exposition().decode(), slow.decode()):
        families = parse(text)
        assert "gpulens_gpu_util_ratio" not in families  # NaN: absent, never a number
        (sm,) = families["gpulens_sm_active_ratio"][1]
        assert sm.labels["modelName"] == 'A "B"\\C\n' and sm.value == 0.5


def test_every_gpu_metric_of_the_catalog_has_a_valid_name() -> None:
    for metric in catalog.metrics_of(Kind.GPU):
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", exporter.PREFIX + metric.name)
