"""The consolidation plan on jobs whose best moves are known."""

from __future__ import annotations

import math

import pytest

from gpulens.analyze.cluster.consolidation import JobLoad, consolidation_plan, pack_nodes

GB = 1e9
H100 = 80 * 1024**3


def test_small_job_goes_to_the_smallest_slice_that_fits() -> None:
    # 6 GB peak, 5 % SM: 1g.10gb holds it (10 GB × 0.9 headroom) and 0.05 / (1/7) = 0.35
    plan = consolidation_plan([JobLoad("j1", 1, 0.05, 6 * GB, H100)])
    (move,) = plan.moves
    assert move.kind == "mig" and move.target == "1g.10gb"
    assert move.gpus_freed == pytest.approx(6 / 7)
    assert move.memory_headroom == pytest.approx(1 - 6 * GB / (H100 / 8))
    assert move.interference == pytest.approx(0.35)


def test_busier_job_needs_a_larger_slice() -> None:
    # 25 GB does not fit 2g (20 GB): 3g.40gb; 0.2 SM over 3/7 = 0.47 of the slice
    plan = consolidation_plan([JobLoad("j", 1, 0.2, 25 * GB, H100)])
    assert plan.moves[0].target == "3g.42gb" and plan.moves[0].risk == "medium"


def test_low_use_jobs_with_big_memory_share_gpus() -> None:
    # 4 jobs at 20 % SM, 30 GB each: too big for a 4g slice (40 GB × 0.9 = 36 ... fits!),
    # so 45 GB each: 2 per GPU by SM (0.4 ≤ 0.7), 1 per GPU by memory (90 GB > 72 GB)
    big = [JobLoad(f"b{i}", 1, 0.2, 45 * GB, H100) for i in range(4)]
    assert consolidation_plan(big).moves == ()
    # 20 GB at 0.3 SM: 2g is too small (21.5 GB × 0.9), 3g and 4g too busy for a 0.5 cap
    # (0.7 and 0.525 of the slice), so they share: 2 per GPU by SM (0.6 ≤ 0.7)
    medium = [JobLoad(f"m{i}", 1, 0.3, 20 * GB, H100) for i in range(4)]
    plan = consolidation_plan(medium, slice_busy=0.5)
    assert [m.kind for m in plan.moves] == ["share", "share"]
    assert plan.gpus_freed == 2.0
    assert plan.moves[0].interference == pytest.approx(0.6)
    assert plan.moves[0].risk == "medium"


def test_busy_and_unknown_jobs_stay() -> None:
    plan = consolidation_plan(
        [
            JobLoad("busy", 1, 0.9, 70 * GB, H100),
            JobLoad("multi", 8, 0.05, 1 * GB, H100),
            JobLoad("blind", 1, math.nan, 1 * GB, H100),
        ]
    )
    assert plan.moves == () and plan.jobs_unknown == 1 and plan.jobs_considered == 2


def test_partly_used_nodes_pack() -> None:
    nodes = [("n1", "gpu", 8.0, 3.0), ("n2", "gpu", 8.0, 4.0), ("n3", "gpu", 8.0, 1.0),
             ("n4", "gpu", 8.0, 8.0), ("n5", "cpu", 8.0, 2.0)]  # fmt: skip
    (move,) = pack_nodes(nodes)
    assert move.kind == "pack" and move.gpus_freed == 16.0  # n1+n2+n3 = 8 GPUs: one node
    assert move.target == "gpu: n2" and set(move.jobs) == {"n1", "n3"}
