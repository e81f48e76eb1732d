"""`report --job ID --prometheus URL` after (and during) the job, against Debian's Prometheus.

The jobs are the real Slurm records of the shared data (sacct and squeue JSON, data_parser
v0.0.37 and v0.0.44). Their nodes' dcgm-exporter history is built here and backfilled with
`promtool`: each GPU holds one activity level for the whole history (`LEVELS`), so the
figures a job's report must show follow from which GPUs the job held and for how long:

- gpu1 and gpu2 (4 GPUs each; gpu2's series name it by its full DNS name) around the
  2025-11-10 jobs of the Slurm-web captures; no job label on the series;
- cdr1 (4 GPUs) around the 2023-03-30 job 10 of the Alliance capture (sacct v0.0.37,
  NODE_FAIL with no end time: it ends at start + elapsed); GPU 2 carries `hpc_job="10"` and
  sits idle holding memory, the others carry `hpc_job="11"` and train.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpulens.app import job_range
from gpulens.collect.scheduler.job_lookup import find_job, read_job
from gpulens.config import load_config
from gpulens.errors import CollectError
from promdata import PROMETHEUS, PROMTOOL, Prometheus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()) and not os.environ.get("CI"),
        reason="needs Prometheus and promtool (Debian package `prometheus`; .ci/run installs it)",
    ),
]
SLURM = "data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd"
CEDAR = "data/scheduler/mila-iqia_clockwork/slurm_state_test/files/sacct_1"
NS = 1_000_000_000
SCRAPE_S = 15
#: (node, GPU) → duty %, SM, tensor, memory MiB
LEVELS: dict[tuple[str, int], tuple[float, float, float, float]] = {
    ("gpu1", 0): (95.0, 0.7, 0.45, 40960.0),
    ("gpu1", 1): (0.0, 0.0, 0.0, 20480.0),
    ("gpu1", 2): (90.0, 0.3, 0.1, 30720.0),
    ("gpu1", 3): (97.0, 0.8, 0.6, 61440.0),
    ("gpu2", 0): (60.0, 0.5, 0.2, 10240.0),
    ("gpu2", 1): (70.0, 0.55, 0.25, 10240.0),
    ("gpu2", 2): (80.0, 0.6, 0.3, 10240.0),
    ("gpu2", 3): (90.0, 0.65, 0.35, 10240.0),
    ("cdr1", 0): (95.0, 0.7, 0.45, 40960.0),
    ("cdr1", 1): (95.0, 0.7, 0.45, 40960.0),
    ("cdr1", 2): (0.0, 0.0, 0.0, 20480.0),
    ("cdr1", 3): (95.0, 0.7, 0.45, 40960.0),
    ("node-a", 0): (95.0, 0.7, 0.45, 40960.0),
    ("node-a", 1): (90.0, 0.3, 0.1, 30720.0),
}
HOSTNAMES = {"gpu1": "gpu1", "gpu2": "gpu2.hpc.example", "cdr1": "cdr1", "node-a": "node-a"}
# the histories: Slurm-web's jobs of 2025-11-10 (running ones are reported 3 h on), cedar's
SLURM_WINDOW = (1_762_783_200, 1_762_803_600)
CEDAR_WINDOW = (1_680_190_200, 1_680_217_800)
CEDAR_JOBS = {0: "11", 1: "11", 2: "10", 3: "11"}
# a Kubernetes node: KAI's gpu-pod on GPU 1 from 10:00 to 12:30 UTC, another pod on GPU 0
K8S_WINDOW = (1_796_029_200, 1_796_047_200)  # 2026-11-30 09:00 to 14:00 UTC
K8S_PODS = {0: "other-pod", 1: "gpu-pod"}


def _openmetrics(path: Path) -> None:
    families = (
        ("DCGM_FI_DEV_GPU_UTIL", 0),
        ("DCGM_FI_PROF_SM_ACTIVE", 1),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 2),
        ("DCGM_FI_DEV_FB_USED", 3),
        ("DCGM_FI_DEV_POWER_USAGE", None),
    )
    with path.open("w", encoding="ascii") as out:
        for family, column in families:
            out.write(f"# TYPE {family} gauge\n")
            for (node, gpu), levels in LEVELS.items():
                lo, hi = {"cdr1": CEDAR_WINDOW, "node-a": K8S_WINDOW}.get(node, SLURM_WINDOW)
                labels = (
                    f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                    f'Hostname="{HOSTNAMES[node]}"'
                )
                if node == "cdr1":
                    labels += f',hpc_job="{CEDAR_JOBS[gpu]}"'
                if node == "node-a":  # dcgm-exporter's Kubernetes pod mapping
                    labels += f',pod="{K8S_PODS[gpu]}",namespace="default"'
                value = levels[column] if column is not None else 100.0 + 400.0 * levels[1]
                for t in range(lo + SCRAPE_S // 2, hi, SCRAPE_S):
                    out.write(f"{family}{{{labels}}} {value:g} {t}\n")
        out.write("# EOF\n")


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("prom-jobs")
    text = home / "history.om"
    _openmetrics(text)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(home / "data")],
        check=True,
        capture_output=True,
    )
    with Prometheus(home, home / "data") as server:
        yield server.url


def _steps(start: float, end: float, step: float) -> int:
    return math.ceil(end / step) - math.floor(start / step)


def _check_gpus(doc: Any, held: list[tuple[str, int]], hours: float) -> None:
    """The report's GPUs are exactly `held`, each with its level over `hours`."""
    gpus = {(g["host"], g["gpu_uuid"]): g for g in doc["gpus"]}
    want = {(HOSTNAMES[n], f"GPU-{n}-{i}"): LEVELS[(n, i)] for n, i in held}
    assert set(gpus) == set(want)
    for key, (duty, sm, tensor, _mem) in want.items():
        row = gpus[key]
        assert row["gpu_hours"] == pytest.approx(hours, abs=1e-9), key
        # activity is stored as float32: equal to 1e-6
        assert row["mean_sm_active"] == pytest.approx(sm, abs=1e-6), key
        assert row["mean_tensor_active"] == pytest.approx(tensor, abs=1e-6), key
        assert row["mean_duty"] == pytest.approx(duty / 100, abs=1e-6), key
    totals = doc["totals"]
    assert totals["gpu_hours"] == pytest.approx(hours * len(held), abs=1e-9)
    # the scheduler says the job held them throughout: all of it is allocated
    assert totals["allocated_gpu_hours"] == pytest.approx(hours * len(held), abs=1e-9)


def _json(view: Any) -> dict[str, Any]:
    from gpulens.present.reports.fleet import RENDERERS

    return dict(json.loads(RENDERERS["json"](view)))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["COLUMNS"] = "400"  # one error line stays one line
    return subprocess.run(
        [sys.executable, "-m", "gpulens", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_completed_sacct_job_after_it_ended(prom: str, shared: Path, tmp_path: Path) -> None:
    """sacct v0.0.44, job 5141: COMPLETED on gpu1 with --gpus 4 (no GPU in its TRES, no
    GPU index): the node's four GPUs, over its 31 s at a 15 s step, through the command."""
    record = shared / SLURM / "25.11/0.0.44/slurmdb-job-gpus-completed.json"
    proc = _cli(
        "report", "--job", "5141", "--prometheus", prom, "--sacct", str(record),
        "--format", "json", "--data-dir", str(tmp_path / "unused"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "job"
    assert doc["step_s"] == 15
    hours = _steps(1_762_784_359, 1_762_784_390, 15) * 15 / 3600
    _check_gpus(doc, [("gpu1", i) for i in range(4)], hours)
    assert doc["scope"]["job_id"] == "5141"
    assert doc["scope"]["user"] == "acuevas"
    assert doc["scope"]["partition"] == "gpu"
    assert doc["scope"]["qos"] == "normal"
    assert any("job 5141 (COMPLETED" in n for n in doc["notes"])


def test_running_job_on_one_gpu_is_reported_up_to_now(prom: str, shared: Path) -> None:
    """squeue v0.0.44, job 4716: RUNNING on gpu1 with gres_detail IDX:0, three hours on."""
    job = read_job(shared / SLURM / "25.11/0.0.44/slurm-job-gpus-multi-types.json", "4716")
    now = 1_762_783_613 + 3 * 3600
    view = job_range.report(load_config(), prom, job, now * NS)
    doc = _json(view)
    assert doc["step_s"] == 60
    steps = _steps(1_762_783_613, now, 60)
    _check_gpus(doc, [("gpu1", 0)], steps * 60 / 3600)
    assert any("still running" in n for n in doc["notes"])
    # only the job's node was read: its 4 GPUs × 5 series × the steps, not gpu2's as well
    read = next(n for n in doc["notes"] if n.startswith("read from"))
    assert f": {4 * 5 * steps:,} points at a 60 s step" in read, read
    assert any(n.startswith("read only the job's nodes: Hostname=~\"(gpu1)") for n in doc["notes"])


def test_multi_node_job_matches_hosts_by_short_name(prom: str, shared: Path) -> None:
    """squeue v0.0.44, job 5679: gpu[1-2], IDX:0-3 on each; gpu2's series say
    gpu2.hpc.example."""
    job = read_job(shared / SLURM / "25.11/0.0.44/slurm-job-gpus-multi-nodes.json", "5679")
    now = 1_762_788_040 + 2 * 3600
    doc = _json(job_range.report(load_config(), prom, job, now * NS))
    held = [(n, i) for n in ("gpu1", "gpu2") for i in range(4)]
    _check_gpus(doc, held, _steps(1_762_788_040, now, 60) * 60 / 3600)


def test_series_with_another_host_label_are_read_whole(prom: str, shared: Path) -> None:
    """A site whose series name the host by another label than the one the read is narrowed
    on (prometheus.labels host=instance|Hostname): nothing matches the narrowed read, so every
    node is read and the job's GPUs are still found."""
    job = read_job(shared / SLURM / "25.11/0.0.44/slurm-job-gpus-multi-types.json", "4716")
    cfg = load_config(overrides={"prometheus.labels": ["host=instance|Hostname"]})
    now = 1_762_783_613 + 3600
    doc = _json(job_range.report(cfg, prom, job, now * NS))
    _check_gpus(doc, [("gpu1", 0)], _steps(1_762_783_613, now, 60) * 60 / 3600)
    assert not any(n.startswith("read only the job's nodes") for n in doc["notes"])


def test_old_sacct_job_found_by_its_series_label_and_idle(prom: str, shared: Path) -> None:
    """sacct dbv0.0.37, job 10: one GPU on cdr1, no index; the series' hpc_job names GPU 2,
    which sat idle holding 20 GiB for the job's 5.7 hours: idle_allocated, with its fix."""
    job = read_job(shared / CEDAR, "10")
    assert job.end_s == 1_680_193_504 + 20_615  # NODE_FAIL without an end: start + elapsed
    doc = _json(job_range.report(load_config(), prom, job, 1_790_000_000 * NS))
    step = doc["step_s"]
    assert step == 60  # the automatic step of a span under 6 h
    hours = _steps(1_680_193_504, 1_680_214_119, step) * step / 3600
    _check_gpus(doc, [("cdr1", 2)], hours)
    assert doc["totals"]["wasted_gpu_hours"] == pytest.approx(hours, abs=1e-9)
    idle = [f for f in doc["findings"] if f["rule_id"] == "idle_allocated"]
    assert idle and idle[0]["subject"]["job_id"] == "10"
    assert idle[0]["recommendation"]
    assert sum(f["impact"]["wasted_gpu_hours"] for f in idle) == pytest.approx(hours, abs=1e-9)


def test_unknown_job_and_pending_job_are_one_clear_error(
    prom: str, shared: Path, tmp_path: Path
) -> None:
    record = shared / SLURM / "25.11/0.0.44/slurmdb-job-gpus-completed.json"
    proc = _cli(
        "report", "--job", "99999", "--prometheus", prom, "--sacct", str(record),
        "--data-dir", str(tmp_path / "unused"),
    )  # fmt: skip
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "job '99999' is not in" in lines[0], proc.stderr
    pending = read_job(shared / SLURM / "25.11/0.0.44/slurmdb-job-gpus-pending.json", "4965")
    with pytest.raises(CollectError, match="has not started"):
        job_range.report(load_config(), prom, pending, 1_790_000_000 * NS)


def test_kubernetes_pod_after_it_ended(prom: str, shared: Path, tmp_path: Path) -> None:
    """KAI's real GPU pod manifest, with the status the API reports once it ran (node-a,
    10:00 to 12:30 UTC): its one GPU found by the series' pod label, through the command."""
    yaml = pytest.importorskip("yaml")
    manifest = "data/scheduler/NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml"
    pod = yaml.safe_load((shared / manifest).read_text())
    pod["spec"]["nodeName"] = "node-a"
    pod["status"] = {
        "phase": "Succeeded",
        "startTime": "2026-11-30T10:00:00Z",
        "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-11-30T12:30:00Z"}}}],
    }
    dump = tmp_path / "pods.json"
    dump.write_text(json.dumps({"kind": "List", "items": [pod]}), encoding="utf-8")
    proc = _cli(
        "report", "--job", "default/gpu-pod", "--prometheus", prom, "--k8s", str(dump),
        "--format", "json", "--data-dir", str(tmp_path / "unused"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["step_s"] == 60
    _check_gpus(doc, [("node-a", 1)], 2.5)
    assert doc["scope"]["team"] == "default"


def test_pod_on_a_node_the_series_name_otherwise(prom: str, shared: Path) -> None:
    """dcgm-exporter in a pod names the host after itself, not the node: no host matches the
    pod's nodeName, so its GPU is the one whose series carry its pod and namespace."""
    yaml = pytest.importorskip("yaml")
    manifest = "data/scheduler/NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml"
    pod = yaml.safe_load((shared / manifest).read_text())
    pod["spec"]["nodeName"] = "worker-7"
    pod["status"] = {
        "phase": "Failed",
        "startTime": "2026-11-30T10:00:00Z",
        "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-11-30T11:00:00Z"}}}],
    }
    job = find_job([pod], "gpu-pod", "pods.yaml")
    doc = _json(job_range.report(load_config(), prom, job, 1_800_000_000 * NS))
    _check_gpus(doc, [("node-a", 1)], 1.0)
    assert any("no series host is named as the scheduler names" in n for n in doc["notes"])
    other = find_job([{**pod, "metadata": {**pod["metadata"], "namespace": "elsewhere"}}],
                     "elsewhere/gpu-pod", "pods.yaml")  # fmt: skip
    with pytest.raises(CollectError, match="no series carries its id"):
        job_range.report(load_config(), prom, other, 1_800_000_000 * NS)
