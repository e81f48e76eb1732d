"""The column helpers, each against a plain-Python reference on random columns."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze._arrays import (
    codes,
    first_rows,
    group_ids,
    group_most_common,
    label_codes,
    most_common,
    not_warmup,
    rows_of,
    split_at,
)

SEEDS = range(20)


def _table(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table(
        {
            "job": [None if x == 0 else f"j{x}" for x in rng.integers(0, 5, n)],
            "host": pa.array([f"h{x}" for x in rng.integers(0, 3, n)]).dictionary_encode(),
            "index": rng.integers(0, 4, n),
            "params": pa.array(np.where(rng.random(n) < 0.2, np.nan, rng.choice([1.0, 7e9], n))),
            "state": [["warmup", "busy", None][i] for i in rng.integers(0, 3, n)],
        }
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_group_ids_number_groups_in_the_order_of_their_key_codes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = _table(rng, int(rng.integers(1, 200)))
    keys = ("job", "host", "index", "params")
    ids, n = group_ids(t, keys)
    # reference: the row-wise unique of the stacked key codes
    stacked = np.stack([codes(t, k) for k in keys], axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    assert n == uniq.shape[0]
    assert ids.tolist() == inverse.reshape(-1).tolist()
    assert first_rows(ids, n).tolist() == [ids.tolist().index(g) for g in range(n)]


@pytest.mark.parametrize("seed", SEEDS)
def test_label_codes_and_not_warmup(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = _table(rng, int(rng.integers(1, 100)))
    for name in ("job", "host", "index", "missing"):
        code, values = label_codes(t, name)
        expected = t.column(name).cast(pa.string()).to_pylist() if name in t.column_names else None
        assert [values[c] for c in code.tolist()] == (expected or [None] * t.num_rows)
        assert len(set(values)) == len(values)
    assert not_warmup(t).tolist() == [s != "warmup" for s in t.column("state").to_pylist()]
    assert not_warmup(t.drop_columns(["state"])).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_most_common_as_counter(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 4, int(rng.integers(1, 30)))
    assert most_common(values) == Counter(values.tolist()).most_common(1)[0][0]
    groups = np.sort(rng.integers(0, 5, values.size))
    groups = np.unique(groups, return_inverse=True)[1].reshape(-1)  # every group has rows
    n = int(groups.max()) + 1
    expected = [Counter(values[groups == g].tolist()).most_common(1)[0][0] for g in range(n)]
    assert group_most_common(groups, values, n).tolist() == expected


def test_split_at_and_rows_of() -> None:
    values = np.arange(10)
    for cuts in ([], [0], [3, 3, 7], [10], [2, 9]):
        got = split_at(values, np.array(cuts, dtype=np.int64))
        assert [g.tolist() for g in got] == [g.tolist() for g in np.split(values, cuts)]
    t = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [0.1, 0.2, 0.3]})
    kept = rows_of(t, np.array([True, False, True]), ("b", "a", "missing"))
    assert kept.column_names == ["b", "a"] and kept.to_pylist() == [
        {"b": "x", "a": 1},
        {"b": "z", "a": 3},
    ]
