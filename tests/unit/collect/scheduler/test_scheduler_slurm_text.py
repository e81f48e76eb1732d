"""Plain-text sinfo and sacct output with GPUs (real captures in ../shared/data/scheduler),
against counts made here from the files' own columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpulens.collect.scheduler.errors import SchedulerInputError
from gpulens.collect.scheduler.slurm import read_slurm

BIOHUB = "data/scheduler/biohub-hpc_prometheus-slurm-exporter-gpu/test_data"
VPENSO = "data/scheduler/vpenso_prometheus-slurm-exporter/test_data"


def _count(gres: str) -> int:
    m = re.match(r"gpu:(?:[^:(]+:)?(\d+)", gres)
    return int(m.group(1)) if m else 0


def test_sinfo_node_lines_once_per_node(shared: Path) -> None:
    """`sinfo -N -O NodeHost,Gres:50,GresUsed:50,StateLong`: a node per partition repeats."""
    path = shared / BIOHUB / "sinfo_cz_gres.txt"
    by_node: dict[str, tuple[int, int, str]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            node, gres, used, state = line.split()
            by_node[node] = (_count(gres), _count(used), state)
    state = read_slurm(path)
    rows = {r["node"]: r for r in state.nodes.to_pylist()}
    assert set(rows) == set(by_node)
    gpu_nodes = {n: v for n, v in by_node.items() if v[0]}
    assert sum(rows[n]["gpus"] for n in gpu_nodes) == sum(v[0] for v in gpu_nodes.values())
    assert sum(rows[n]["used_gpus"] for n in gpu_nodes) == sum(v[1] for v in gpu_nodes.values())
    drained = [n for n, v in by_node.items() if v[2].startswith("drained")]
    assert drained and all(rows[n]["node_state"] == "DRAINED" for n in drained)
    assert state.data_parser == "text" and state.jobs.num_rows == 0


def test_sinfo_with_a_partition_column(shared: Path) -> None:
    nodes = read_slurm(shared / BIOHUB / "sinfo_mem2.txt").nodes.to_pylist()
    assert nodes and {r["queues"] for r in nodes} == {"gpu"}
    assert all(r["gpus"] == 4.0 for r in nodes)


@pytest.mark.parametrize(
    ("name", "gpus"),
    [
        ("slurm-20.11.8/sinfo_gpus_total.txt", 48.0),  # 24 nodes × gpu:2
        ("slurm-21.08.5/sinfo_gpus_total.txt", 16.0),  # 2 nodes × gpu:8
        ("_slurm-17.11.2/sinfo_gpus_total.txt", 16.0),  # two nodes, gpu:8 each
    ],
)
def test_aggregated_sinfo(shared: Path, name: str, gpus: float) -> None:
    nodes = read_slurm(shared / VPENSO / name).nodes
    assert sum(g or 0 for g in nodes["gpus"].to_pylist()) == gpus


def test_sacct_allocgres_lines_are_running_jobs(shared: Path) -> None:
    path = shared / VPENSO / "_slurm-17.11.2/sacct_gpus_allocated.txt"
    expected = [_count(x) for x in path.read_text().split()]
    jobs = read_slurm(path).jobs
    assert jobs["gpus"].to_pylist() == expected
    assert set(jobs["state"].to_pylist()) == {"RUNNING"}


def test_input_without_gres_is_one_clear_error(shared: Path, tmp_path: Path) -> None:
    """squeue/sinfo templated as one JSON object per line (no GPU field) is refused, and so is
    text without a gres column."""
    path = shared / "data/scheduler/rivosinc_prometheus-slurm-exporter/exporter/fixtures"
    with pytest.raises(SchedulerInputError, match=r"sinfo_fallback\.txt: not readable JSON"):
        read_slurm(path / "sinfo_fallback.txt")
    text = tmp_path / "sinfo.txt"
    text.write_text("cn1  64  idle  normal\n")
    with pytest.raises(SchedulerInputError, match=r"sinfo\.txt: neither JSON nor sinfo/sacct"):
        read_slurm(text)
