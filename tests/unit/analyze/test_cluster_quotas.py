"""Quota use, starvation, monopoly and fairness on a history whose violations are known."""

from __future__ import annotations

import numpy as np
import pytest

from gpulens.analyze.cluster.grid import Grid
from gpulens.analyze.cluster.quotas import gini, quota_report
from gpulens.quota_model import QueueQuota, Quotas


def history() -> Grid:
    """Hourly, 10 h. vision (quota 16) holds 20 for 5 h while nlp (quota 8) holds 4 with 6
    pending; then vision holds 10 with 2 pending while nlp holds its 8."""
    in_use = np.array([[4.0] * 5 + [8.0] * 5, [20.0] * 5 + [10.0] * 5])
    pending = np.array([[6.0] * 5 + [0.0] * 5, [0.0] * 5 + [2.0] * 5])
    total = np.full((2, 10), 24.0)
    return Grid(("nlp", "vision"), 0, 3600, total, in_use, pending)


QUOTAS = Quotas(
    queues={"vision": QueueQuota("vision", 16.0), "nlp-cq": QueueQuota("nlp-cq", 8.0)},
    aliases={"nlp": "nlp-cq"},
)


def test_starvation_and_monopoly() -> None:
    r = quota_report(history(), QUOTAS, {"vision": 30.0, "nlp": 40.0})
    by = {q.name: q for q in r.queues}
    nlp, vision = by["nlp"], by["vision"]
    assert nlp.quota.name == "nlp-cq"
    # nlp owed min(6, 8 - 4) = 4 GPUs for 5 h; vision owed min(2, 16 - 10) = 2 for 5 h
    assert nlp.starved_gpu_hours == 20.0 and nlp.starved_steps == 5
    assert vision.starved_gpu_hours == 10.0 and vision.starved_steps == 5
    # vision 4 over quota while nlp was owed 4: 4 GPUs × 5 h
    assert vision.monopoly_gpu_hours == 20.0 and vision.monopoly_steps == 5
    assert nlp.monopoly_gpu_hours == 0.0
    assert vision.usage_over_quota == pytest.approx(150 / 160)
    assert vision.over_quota_share == 0.5 and vision.peak_in_use == 20.0
    assert nlp.usage_over_quota == pytest.approx(60 / 80)
    alloc = np.array([60 / 80, 150 / 160])
    assert r.jain_allocation == pytest.approx(alloc.sum() ** 2 / (2 * (alloc**2).sum()))
    useful = np.array([40 / 8, 30 / 16])
    assert r.gini_useful == pytest.approx(abs(useful[0] - useful[1]) / (2 * useful.sum()))
    assert r.jain_useful is not None and r.jain_useful < r.jain_allocation
    assert r.unmatched == ()


def test_queues_without_quota_are_listed() -> None:
    r = quota_report(history(), Quotas(queues={"vision": QueueQuota("vision", 16.0)}))
    assert [q.name for q in r.queues] == ["vision"] and r.unmatched == ("nlp",)
    assert r.jain_useful is None and r.queues[0].monopoly_gpu_hours == 0.0


def test_gini_bounds() -> None:
    assert gini([1.0, 1.0, 1.0]) == 0.0
    assert gini([0.0, 0.0, 3.0]) == pytest.approx(2 / 3)
    assert gini([0.0, 0.0]) is None


def test_without_pending_data_starvation_is_unknown() -> None:
    g = history()
    blind = Grid(g.queues, g.start_s, g.step_s, g.total, g.in_use, np.full_like(g.pending, np.nan))
    r = quota_report(blind, QUOTAS)
    for q in r.queues:
        assert np.isnan(q.starved_gpu_hours) and np.isnan(q.monopoly_gpu_hours)
    assert r.queues[1].usage_over_quota == pytest.approx(150 / 160)
