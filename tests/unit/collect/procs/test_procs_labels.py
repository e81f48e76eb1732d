"""The identity labels are defined once (gpulens.model): every label the resolver emits is one
of them, and each reaches the store, the interval frame and the exporter as the model says
(`pod_uid` stops at the process table: it is not an attribution label)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from fakeproc import CRI_ID, POD_UID, FakeProc
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyze.schema import ALL_COLUMNS, ATTRIBUTION_COLUMNS
from gpulens.app import live as live_module
from gpulens.app.live import LiveState
from gpulens.collect.procs.attribution import ProcAttribution
from gpulens.collect.procs.kube import pod_labels
from gpulens.collect.procs.parse import parse_label_overrides
from gpulens.model import (
    ATTRIBUTION_LABELS,
    HOLDER_LABELS,
    LABEL_KEYS,
    NOT_ATTRIBUTED,
    PROCESS_IDENTITY_LABELS,
    Kind,
    Reading,
)
from gpulens.pipeline.scheduler import TickResult
from gpulens.present.prometheus import exporter
from gpulens.store import SegmentWriter, Store, frames
from gpulens.store.schema import empty_schema

NS = 1_000_000_000
T0 = 1_790_000_040 * NS  # on a whole minute
GPU = {"host": "node1", "gpu_uuid": "GPU-a", "gpu_index": "0", "gpu_model": "NVIDIA H100 PCIe"}


def test_the_subsets_are_named_in_the_model() -> None:
    assert {"pod_uid"} == NOT_ATTRIBUTED and set(PROCESS_IDENTITY_LABELS) >= NOT_ATTRIBUTED
    assert (
        tuple(k for k in PROCESS_IDENTITY_LABELS if k not in NOT_ATTRIBUTED) == ATTRIBUTION_LABELS
    )
    assert tuple(k for k in ATTRIBUTION_LABELS if k != "process_name") == HOLDER_LABELS
    assert len(set(LABEL_KEYS)) == len(LABEL_KEYS)
    assert set(PROCESS_IDENTITY_LABELS) <= set(LABEL_KEYS)


@pytest.fixture
def labels(tmp_path: Path) -> Mapping[str, str]:
    """What the real resolver says about a Slurm-launched process in a Kubernetes pod."""
    proc = FakeProc(tmp_path / "proc")
    slice_ = f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice"
    env = {"SLURM_JOB_ID": "777", "SLURM_JOB_ACCOUNT": "physics"}
    proc.add(
        100,
        cgroup=f"0::/kubepods.slice/kubepods-burstable.slice/{slice_}/cri-containerd-{CRI_ID}.scope",
        environ=env,
        maps=["/site/torch/lib/libtorch_cuda.so"],
    )
    pods = tmp_path / "pods.json"
    record = {"pod": "llm-0", "namespace": "serving", "gpulens.io/team": "search"}
    pods.write_text(json.dumps({POD_UID: record}))
    resolver = ProcAttribution(proc.root, user_name={1000: "alice"}.get, pod_labels_file=pods)
    return resolver.identify(100)


def test_the_resolver_emits_the_models_identity_labels(labels: Mapping[str, str]) -> None:
    assert set(labels) == set(PROCESS_IDENTITY_LABELS)
    assert labels["pod_uid"] == POD_UID


def test_declared_labels_are_the_attribution_labels() -> None:
    declared, ignored = parse_label_overrides(
        ",".join(f"{k}=v-{k}" for k in PROCESS_IDENTITY_LABELS)
    )
    assert tuple(declared) == ATTRIBUTION_LABELS
    assert ignored == [f"{k}=v-{k}" for k in sorted(NOT_ATTRIBUTED)]
    from_pod = pod_labels({f"gpulens.io/{k}": f"v-{k}" for k in PROCESS_IDENTITY_LABELS}, None)
    assert set(from_pod) == set(ATTRIBUTION_LABELS)


def _readings(labels: Mapping[str, str], seconds: int) -> list[tuple[int, list[Reading]]]:
    """An allocated, idle GPU: its one process holds memory and runs nothing."""
    ticks = []
    for s in range(seconds):
        ts = T0 + s * NS
        gpu = {"gpu_util_ratio": 0.0, "sm_active_ratio": 0.0, "memory_used_bytes": 30e9}
        process = {"process_memory_used_bytes": 30e9}
        ticks.append(
            (
                ts,
                [
                    Reading(Kind.GPU, ts, GPU, {**gpu, "memory_total_bytes": 80e9}),
                    Reading(Kind.PROCESS, ts, {**GPU, "pid": "100", **labels}, process),
                ],
            )
        )
    return ticks


def test_store_and_frames_carry_the_attribution(labels: Mapping[str, str], tmp_path: Path) -> None:
    for kind in (Kind.GPU, Kind.PROCESS):
        assert set(PROCESS_IDENTITY_LABELS) <= set(empty_schema(kind).names)
    assert ATTRIBUTION_COLUMNS == ("pid", *ATTRIBUTION_LABELS) == frames.PROCESS_LABELS
    assert frames.COLUMNS == ALL_COLUMNS and not NOT_ATTRIBUTED & set(ALL_COLUMNS)
    with SegmentWriter(tmp_path, "node1") as writer:
        for _, readings in _readings(labels, 120):
            writer.append(readings)
    with Store(tmp_path) as store:
        stored = store.query("SELECT DISTINCT pod_uid FROM process").column(0).to_pylist()
        assert stored == [POD_UID]  # the process table keeps what joins to Kubernetes data
        rows = frames.gpu_intervals(store, 60.0).to_pylist()
        assert len(rows) == 2
        for row in rows:
            assert {k: row[k] for k in ATTRIBUTION_LABELS} == {
                k: labels[k] for k in ATTRIBUTION_LABELS
            }
        for key in frames.PROCESS_LABELS:  # every attribution column filters the frame
            value = "100" if key == "pid" else labels[key]
            assert frames.gpu_intervals(store, 60.0, where={key: value}).num_rows == 2
        for key in NOT_ATTRIBUTED:
            with pytest.raises(ValueError, match="cannot filter"):
                frames.gpu_intervals(store, 60.0, where={key: labels[key]})


def test_live_rows_and_the_exporter_carry_the_attribution(labels: Mapping[str, str]) -> None:
    assert live_module.ATTRIBUTION == HOLDER_LABELS
    assert set(HOLDER_LABELS) <= set(live_module.WASTE_LABELS)
    state = LiveState(state_window_s=30, keep_s=120)
    try:
        for ts, readings in _readings(labels, 95):
            state.on_tick(TickResult(ts, 0.0, readings=readings))
            if (ts - T0) // NS % 30 == 29:
                state.refresh()
        snap = state.snapshot()
    finally:
        state.close()
    registry = exporter.registry(lambda: snap)
    text = generate_latest(registry).decode("utf-8")
    series: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found = {k: v for k, v in sample.labels.items() if v}
            series.setdefault(sample.name, []).append(found)
    holder = {k: labels[k] for k in HOLDER_LABELS}
    for name in ("gpulens_gpu_util_ratio", "gpulens_gpu_state", "gpulens_wasted_gpu_seconds_total"):
        assert series.get(name), name
        for found in series[name]:
            assert {k: found.get(k) for k in HOLDER_LABELS} == holder, name
            assert "process_name" not in found
    attribution = {k: labels[k] for k in ATTRIBUTION_LABELS}
    for found in series["gpulens_gpu_processes"]:
        assert {k: found.get(k) for k in ATTRIBUTION_LABELS} == attribution
    for name, found_all in series.items():
        for found in found_all:
            assert not NOT_ATTRIBUTED & set(found), name
