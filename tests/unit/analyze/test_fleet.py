"""Fleet statistics: idle-while-holding share, distributions, Gini skew, activity gap."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.analyze.fleet import (
    GIB,
    activity_gap,
    distribution,
    entity_means,
    fleet_summary,
    gini,
    idle_holding_share,
    skew,
)


def test_idle_holding_counts_only_known_samples() -> None:
    duty = [0.0, 0.0, 0.5, 0.0, np.nan]
    mem = [2 * GIB, 0.5 * GIB, 2 * GIB, np.nan, 2 * GIB]
    r = idle_holding_share(duty, mem)
    assert (r.samples, r.idle_holding) == (3, 1)
    assert r.share == pytest.approx(1 / 3)
    assert idle_holding_share([], []).share is None


def test_gini_known_values() -> None:
    assert gini([1, 1, 1, 1]) == pytest.approx(0.0)
    assert gini([0, 0, 0, 10]) == pytest.approx(0.75)  # (n-1)/n for one holder
    assert gini([1, 2, 3, 4]) == pytest.approx(0.25)
    assert gini([]) is None and gini([0, 0]) is None
    with pytest.raises(ValueError, match="non-negative"):
        gini([-1, 2])


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50))
def test_gini_matches_mean_absolute_difference(values: list[float]) -> None:
    v = np.asarray(values)
    if v.sum() <= 0:
        return
    expected = np.abs(v[:, None] - v[None, :]).sum() / (2 * len(v) ** 2 * v.mean())
    got = gini(v)
    assert got is not None and got == pytest.approx(expected, abs=1e-9)


def test_entity_means_and_skew_leave_out_missing() -> None:
    names, means = entity_means(pa.array(["a", "a", "b", None, "c"]), [0.2, 0.4, 1.0, 0.9, np.nan])
    assert names == ["a", "b"] and means.tolist() == pytest.approx([0.3, 1.0])
    s = skew(pa.array(["a", "b", "b", "c"]), [1.0, 2.0, 2.0, 0.0], top=2)
    assert s.groups == 3 and s.top == (("b", 4.0), ("a", 1.0))
    assert s.gini == pytest.approx(gini([1.0, 4.0, 0.0]))


def test_distribution_quantiles_and_histogram() -> None:
    d = distribution([0.0, 0.25, 0.5, 0.75, 1.0, np.nan], bins=4)
    assert d.count == 5 and d.median == 0.5 and d.mean == pytest.approx(0.5)
    assert sum(d.counts) == 5 and d.counts == (1, 1, 1, 2)
    assert distribution([]).median is None


def test_activity_gap_names_the_gap() -> None:
    gap = activity_gap([0.99] * 5, [0.5] * 5, [0.14] * 5)
    assert gap.summary == "duty cycle median 99 % while SM activity 50 % and tensor 14 %"
    assert "not measured" in activity_gap([0.5]).summary
    assert "tensor not measured" in activity_gap([0.5], [0.2]).summary


def test_fleet_summary_over_samples_with_frame_columns() -> None:
    t = pa.table(
        {
            "pod": ["a", "a", "b"],
            "duty": [0.0, 0.5, None],
            "memory_used_bytes": [2 * GIB, None, 3 * GIB],
        }
    )
    summary = fleet_summary(t, entity="pod")
    assert summary.idle_holding.idle_holding == 1 and summary.idle_holding.samples == 1
    assert summary.samples == 3
    assert summary.entities == 1  # pod b has no duty cycle: left out, not counted as 0
