"""The model key of engine migration against a row-by-row reference, on random frames."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze._arrays import label_codes
from gpulens.analyze.engines import _by_model, _model_keys


def _labels(frame: pa.Table, keys: tuple[str, ...]) -> list[str | None]:
    """Per row: "key=value, ..." (floats to 4 significant digits), None when one is missing."""
    out: list[str | None] = []
    for r in frame.to_pylist():
        vals = []
        for k in keys:
            v = r.get(k)
            if isinstance(v, float):
                v = None if v != v else f"{v:.4g}"
            vals.append(None if v is None else str(v))
        ok = keys and all(v is not None for v in vals)
        out.append(", ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=True)) if ok else None)
    return out


def _frame(rng: np.random.Generator, n: int) -> pa.Table:
    params = rng.choice([3.35e8, 3.3500001e8, 7e9, np.nan], n)  # two that print alike
    return pa.table(
        {
            "project": [None if x == 0 else f"p{x}" for x in rng.integers(0, 3, n)],
            "model_parameters": pa.array(params, from_pandas=bool(rng.integers(0, 2))),
            "batch": rng.integers(0, 3, n),
            "engine": [["pytorch", "tensorrt", "vLLM", None][i] for i in rng.integers(0, 4, n)],
        }
    )


@pytest.mark.parametrize("seed", range(20))
def test_model_keys_label_rows_as_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(1, 80)))
    for keys in (("project", "model_parameters"), ("model_parameters", "batch"), ("missing",), ()):
        code, labels = _model_keys(frame, keys)
        assert [labels[c] for c in code.tolist()] == _labels(frame, keys)
        assert len(set(labels)) == len(labels)  # one code per label


@pytest.mark.parametrize("seed", range(20))
def test_by_model_groups_optimised_rows_in_order_of_appearance(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = _frame(rng, int(rng.integers(1, 80)))
    engine, engines = label_codes(frame, "engine")
    model, labels = _model_keys(frame, ("project", "model_parameters"))
    got = _by_model(engine, engines, model, labels, {"tensorrt", "vllm"})
    expected: dict[tuple[str, str], list[int]] = {}
    for i, (e, m) in enumerate(
        zip(
            frame.column("engine").to_pylist(),
            _labels(frame, ("project", "model_parameters")),
            strict=True,
        )
    ):
        if e is not None and m is not None and e.lower() in {"tensorrt", "vllm"}:
            expected.setdefault((m, e), []).append(i)
    assert {k: v.tolist() for k, v in got.items()} == expected
    assert list(got) == list(expected)
