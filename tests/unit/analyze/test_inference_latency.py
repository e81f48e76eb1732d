"""Serving latency combined over windows, the engine choice by load, and the measured gain."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpulens.analyze.inference import (
    Objective,
    engine_choice,
    latency_by_engine,
    measured_gain,
    mixture_quantiles,
)
from gpulens.findings.inference import measured_migration

QS = (0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
KEYS = ("min", "p25", "p50", "p75", "p90", "p95", "p99", "max")


def window(
    lat: np.ndarray,
    seconds: float,
    engine: str,
    job: str = "svc",
    model: str = "M",
    batch: float = 1.0,
) -> dict:
    """One reading as the wrapper writes it, computed here from the calls with numpy."""
    row: dict = {
        "ts": 0,
        "job_id": job,
        "model": model,
        "engine": engine,
        "app_requests": float(lat.size),
        "app_requests_per_second": lat.size / seconds,
        "app_latency_mean_seconds": float(lat.mean()),
        "app_batch_size": batch,
    }
    for q, k in zip(QS, KEYS, strict=True):
        row[f"app_latency_{k}_seconds"] = float(np.quantile(lat, q))
    return row


def test_one_window_gives_its_own_quantiles_back() -> None:
    lat = np.random.default_rng(1).lognormal(-5, 0.3, 500)
    table = pa.Table.from_pylist([window(lat, 5.0, "eager")])
    (row,) = latency_by_engine(table)
    assert row["p50_ms"] == pytest.approx(np.quantile(lat, 0.5) * 1e3)
    assert row["p95_ms"] == pytest.approx(np.quantile(lat, 0.95) * 1e3)
    assert row["p99_ms"] == pytest.approx(np.quantile(lat, 0.99) * 1e3)
    assert row["calls"] == 500 and row["qps"] == pytest.approx(100.0)


def test_many_windows_come_close_to_the_quantiles_of_all_calls() -> None:
    rng = np.random.default_rng(2)
    parts = [rng.lognormal(-5 + 0.2 * i, 0.4, 300 + 50 * i) for i in range(8)]
    table = pa.Table.from_pylist([window(p, 3.0, "eager") for p in parts])
    every = np.concatenate(parts)
    (row,) = latency_by_engine(table)
    assert row["calls"] == every.size
    for q, key in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms")):
        assert row[key] == pytest.approx(np.quantile(every, q) * 1e3, rel=0.05)
    assert row["qps"] == pytest.approx(every.size / (3.0 * 8))


def test_mixture_of_two_disjoint_windows_puts_the_median_between_them() -> None:
    knots = np.array(
        [[1.0, 1.25, 1.5, 1.75, 1.9, 1.95, 1.99, 2.0], [3.0, 3.25, 3.5, 3.75, 3.9, 3.95, 3.99, 4.0]]
    )
    (p25, p75) = mixture_quantiles(np.array([100.0, 100.0]), knots, (0.25, 0.75))
    assert p25 == pytest.approx(1.5, abs=0.01) and p75 == pytest.approx(3.5, abs=0.01)


def test_engine_choice_finds_the_load_where_eager_misses_the_objective() -> None:
    rng = np.random.default_rng(4)
    rows = []
    # eager: latency grows with load; p95 crosses 10 ms between 40 and 80 requests/s
    for qps, scale in ((10, 0.002), (20, 0.003), (40, 0.005), (80, 0.02), (160, 0.05)):
        rows.append(window(rng.normal(scale, scale * 0.1, qps * 5).clip(1e-5), 5.0, "eager"))
    for qps in (10, 40, 160, 320):  # compile: flat 1 ms
        rows.append(window(rng.normal(0.001, 1e-4, qps * 5).clip(1e-5), 5.0, "compile"))
    (c,) = engine_choice(pa.Table.from_pylist(rows), Objective(0.010, "p95"))
    assert c["native_engine"] == "eager"
    assert c["native_holds_up_to_qps"] == pytest.approx(40, rel=0.01)
    assert c["native_misses_from_qps"] == pytest.approx(80, rel=0.01)
    assert c["switch_above_qps"] == pytest.approx(80, rel=0.01)
    assert c["optimised_engine"] == "compile"
    assert c["optimised_holds_up_to_qps"] == pytest.approx(320, rel=0.01)
    assert "misses it from 80" in c["verdict"] and "compile holds it up to 320" in c["verdict"]
    assert [round(p["qps"]) for p in c["curves"]["eager"]] == [10, 20, 40, 80, 160]


def test_engine_choice_needs_a_native_and_an_optimised_engine() -> None:
    lat = np.full(100, 0.001)
    only_eager = pa.Table.from_pylist([window(lat, 1.0, "eager")])
    assert engine_choice(only_eager) == []
    with pytest.raises(ValueError, match="p95"):
        Objective(0.01, "p97")


def test_measured_gain_and_the_finding_say_they_are_measured() -> None:
    rows = [
        {"job_id": "svc", "model": "M", "engine": "eager", "p50_ms": 8.0, "calls": 900},
        {"job_id": "svc", "model": "M", "engine": "compile", "p50_ms": 2.0, "calls": 800},
        {"job_id": "svc", "model": "N", "engine": "tensorrt", "p50_ms": 0.1, "calls": 5},
    ]
    gain, basis, engine, _, _ = measured_gain(rows, ["svc"])  # type: ignore[misc]
    assert gain == pytest.approx(4.0) and engine == "compile"  # model N is another model
    assert basis.startswith("measured: median latency of the same model (M")
    (f,) = measured_migration(rows, (0, 1))
    assert f.rule_id == "engine_migration" and f.subject["job_id"] == "svc"
    ev = {e.metric: e for e in f.evidence}
    assert ev["latency_p50_ms"].value == 8.0 and ev["latency_p50_ms_optimised"].value == 2.0
    assert (
        ev["expected_gain"].value == pytest.approx(4.0) and "measured" in ev["expected_gain"].note
    )
    assert measured_migration(rows, (0, 1), skip_jobs={"svc"}) == []
    slow = [dict(rows[0]), {**rows[1], "p50_ms": 7.5}]
    assert measured_migration(slow, (0, 1)) == []  # 1.07x is below the minimum gain


def test_latency_against_batch_size() -> None:
    rng = np.random.default_rng(5)
    small = rng.normal(0.002, 1e-4, 400)  # batch 1: 2 ms
    large = rng.normal(0.006, 3e-4, 100)  # batch 16: 6 ms
    rows = [
        window(small, 4.0, "eager", batch=1.0),
        window(large, 4.0, "eager", batch=16.0),
        window(np.full(200, 0.001), 4.0, "compile", batch=16.0),
    ]
    (c,) = engine_choice(pa.Table.from_pylist(rows), Objective(0.010, "p95"))
    eager = {p["batch_size"]: p for p in c["batch_curves"]["eager"]}
    assert sorted(eager) == [1.0, 16.0]
    assert eager[1.0]["latency_ms"] == pytest.approx(np.quantile(small, 0.95) * 1e3)
    assert eager[16.0]["samples_per_second"] == pytest.approx(100 * 16 / 4.0)
    assert eager[1.0]["samples_per_second"] == pytest.approx(400 / 4.0)
    assert [p["batch_size"] for p in c["batch_curves"]["compile"]] == [16.0]
