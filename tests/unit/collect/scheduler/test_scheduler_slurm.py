"""Slurm JSON of every data_parser version in ../shared/data/scheduler, parsed: jobs, GPU
counts (from gres_detail / tres_per_* / submit line where the TRES totals lack them), nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.gres import gres_gpus, submit_line_gpus, tres_gpus
from gpulens.collect.scheduler.slurm import parse_slurm, read_slurm

RACK = "scheduler/rackslab_Slurm-web/tests/assets/slurmrestd"
# file → (data_parser, accounting?, {job_id: (state, gpus)})
JOBS = {
    f"{RACK}/24.05/0.0.41/slurm-job-gpus-running.json": ("v0.0.41", False, {"9": ("RUNNING", 4)}),
    f"{RACK}/24.05/0.0.41/slurm-job-gpus-pending.json": ("v0.0.41", False, {"2": ("PENDING", 4)}),
    f"{RACK}/24.05/0.0.41/slurmdb-job-gpus-completed.json": (
        "v0.0.41",
        True,
        {"10": ("COMPLETED", 4)},
    ),
    f"{RACK}/24.11/0.0.42/slurm-jobs.json": (
        "v0.0.42",
        False,
        {"6355": ("CANCELLED", 1), "6356": ("CANCELLED", 2), "6369": ("PENDING", 0)},
    ),
    f"{RACK}/25.05/0.0.43/slurmdb-job-gpus-running.json": (
        "v0.0.43",
        True,
        {"4751": ("RUNNING", 4)},
    ),
    f"{RACK}/25.11/0.0.44/slurm-job-gpus-multi-nodes.json": (
        "v0.0.44",
        False,
        {"5679": ("RUNNING", 8)},
    ),
    f"{RACK}/25.11/0.0.44/slurm-job-gpus-multi-types.json": (
        "v0.0.44",
        False,
        {"4716": ("RUNNING", 1)},
    ),
    f"{RACK}/25.11/0.0.44/slurmdb-job-gpus-multi-types.json": (
        "v0.0.44",
        True,
        {"4716": ("RUNNING", 1)},
    ),
    f"{RACK}/25.11/0.0.44/slurmdb-job-gpus-pending.json": (
        "v0.0.44",
        True,
        {"4965": ("PENDING", 4)},
    ),
    f"{RACK}/25.11/0.0.44/slurm-job-pending.json": ("v0.0.44", False, {"5750": ("PENDING", 0)}),
    "scheduler/lcrownover_prometheus-slurm-exporter/testdata/V0040OpenapiJobInfoResp.json": (
        "v0.0.40",
        False,
        {"7745162": ("RUNNING", 0), "7725337": ("PENDING", 0)},
    ),
    "scheduler/rivosinc_prometheus-slurm-exporter/exporter/fixtures/squeue_out.json": (
        "v0.0.37",
        False,
        {"26515966": ("RUNNING", 0), "58948420": ("PENDING", 0)},
    ),
    "scheduler/mila-iqia_clockwork/slurm_state_test/files/sacct_1": (
        "v0.0.37",
        True,
        {"10": ("NODE_FAIL", 1), "20": ("REQUEUED", 1)},
    ),
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_data_parser_version_parses(shared: Path, name: str) -> None:
    version, accounting, expected = JOBS[name]
    state = read_slurm(shared / "data" / name)
    assert state.data_parser == version
    assert state.accounting is accounting
    got = {r["job_id"]: (r["state"], r["gpus"]) for r in state.jobs.to_pylist()}
    for job_id, want in expected.items():
        assert got[job_id] == want, (job_id, got[job_id])


def test_the_versions_present_are_all_covered(shared: Path) -> None:
    """Every data_parser version among the shared samples has a case above."""
    seen = set()
    for path in (shared / "data" / "scheduler").rglob("*"):
        if path.suffix in ("", ".json") and path.is_file() and "prometheus/" not in str(path):
            try:
                meta = json.loads(path.read_bytes()).get("meta", {})
            except ValueError:
                continue
            plugin = meta.get("plugin", {}) if isinstance(meta, dict) else {}
            parser = plugin.get("data_parser") or plugin.get("type") or ""
            if "v0.0." in parser:
                seen.add("v" + parser.rsplit("v", 1)[-1])
    assert seen == {v for v, _, _ in JOBS.values()}, seen


def _tres_totals_only(job: dict) -> float:
    """What a parser that reads the TRES totals alone would count."""
    text = job.get("tres_alloc_str") or job.get("tres_req_str") or ""
    entries = (job.get("tres") or {}).get("allocated") or []
    from_list = sum(e["count"] for e in entries if e.get("type") == "gres" and e["name"] == "gpu")
    return tres_gpus(text) or from_list or 0.0


@pytest.mark.parametrize(
    "name",
    [
        f"{RACK}/24.05/0.0.41/slurm-job-gpus-running.json",
        f"{RACK}/25.11/0.0.44/slurm-job-gpus-multi-nodes.json",
        f"{RACK}/25.11/0.0.44/slurmdb-job-gpus-running.json",
        f"{RACK}/25.11/0.0.44/slurmdb-job-gpus-completed.json",
    ],
)
def test_gpus_come_from_gres_when_the_tres_totals_lack_them(shared: Path, name: str) -> None:
    """On this cluster the TRES totals name no GPU: reading them alone counts 0."""
    doc = json.loads((shared / "data" / name).read_bytes())
    job = doc["jobs"][0]
    assert _tres_totals_only(job) == 0
    gpus = parse_slurm(doc, name).jobs.column("gpus").to_pylist()[0]
    assert gpus in (4.0, 8.0)


def test_gpus_from_the_tres_when_it_has_them(shared: Path) -> None:
    """Clockwork's cedar sacct carries gres/gpu in its TRES list."""
    state = read_slurm(shared / "data/scheduler/mila-iqia_clockwork/slurm_state_test/files/sacct_1")
    assert state.jobs.column("gpus").to_pylist() == [1.0, 1.0]
    assert state.jobs.column("queue").to_pylist() == ["partition1", "partition2"]


def test_squeue_forecasts_are_not_times(shared: Path) -> None:
    """squeue's start/end of a pending job are the scheduler's forecast, not what happened."""
    state = read_slurm(shared / "data" / f"{RACK}/25.11/0.0.44/slurm-job-gpus-pending.json")
    row = state.jobs.to_pylist()[0]
    assert row["submit_s"] == 1762783691.0
    assert row["start_s"] is None and row["end_s"] is None


def test_nodes_with_gres_and_mig(shared: Path) -> None:
    path = "scheduler/lcrownover_prometheus-slurm-exporter/testdata/V0040OpenapiNodesResp.json"
    nodes = {r["node"]: r for r in read_slurm(shared / "data" / path).nodes.to_pylist()}
    assert (nodes["n0162"]["gpus"], nodes["n0162"]["used_gpus"]) == (21.0, 9.0)
    assert nodes["n0162"]["queues"] == "gpu,gpulong,preempt"
    assert (nodes["n0160"]["gpus"], nodes["n0160"]["used_gpus"]) == (1.0, 1.0)
    assert nodes["dtn1"]["gpus"] is None and "DOWN" in nodes["dtn1"]["node_state"]
    rack = read_slurm(shared / "data" / f"{RACK}/25.11/0.0.44/slurm-nodes.json").nodes
    gpu1 = next(r for r in rack.to_pylist() if r["node"] == "gpu1")
    assert (gpu1["gpus"], gpu1["used_gpus"], gpu1["queues"]) == (4.0, 0.0, "gpu")


def test_gres_strings() -> None:
    assert gres_gpus("gpu:h100:4(IDX:0-3)") == 4
    assert gres_gpus("gpu:1g.10gb:9(IDX:0-3,5-9)") == 9
    assert gres_gpus("gres/gpu:h100:1,gres/gpu:h200:1") == 2
    assert gres_gpus("gpu") == 1
    assert gres_gpus("shard:8") is None and gres_gpus("") is None
    assert tres_gpus("cpu=48,mem=238G,gres/gpu=1") == 1
    assert tres_gpus("cpu=2,gres/gpu:a100=2,gres/gpu=2") == 2
    assert tres_gpus("cpu=1,mem=512M,node=1,billing=1") is None
    assert submit_line_gpus("sbatch --partition gpu --gpus 4 --begin now", 1) == 4
    assert submit_line_gpus("sbatch --gpus-per-node h100:2", 3) == 6
    assert submit_line_gpus("srun --gres=gpu:a100:2 x", 2) == 4
    assert submit_line_gpus("sbatch --wrap hostname", 1) is None


def test_not_slurm_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "pods.json"
    bad.write_text('{"items": []}')
    with pytest.raises(SchedulerInputError, match=r"pods\.json.*neither 'jobs' nor 'nodes'"):
        read_slurm(bad)
    bad.write_text("{not json")
    with pytest.raises(SchedulerInputError, match=r"pods\.json: not readable JSON"):
        read_slurm(bad)
