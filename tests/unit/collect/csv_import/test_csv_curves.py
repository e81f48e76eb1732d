"""Quantile curves (the ``acme-nsdi24`` preset): inverse-CDF samples, labels from the file name,
timestamps from the start time, errors naming the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpulens.app.ingest import ingest
from gpulens.collect.csv_import import (
    CsvImportError,
    CurveColumn,
    CurveMap,
    expand_curve,
    expand_curves,
    get_preset,
    parse_csv_table,
    parse_curves,
)
from gpulens.config import load_config
from gpulens.errors import ConfigError
from gpulens.model import Kind
from gpulens.store import Store

T0 = 1_710_201_600 * 1_000_000_000
CURVES = "cdf_pct,gpu_util,sm_active\n0,0,0\n50,90,40\n100,100,80\n"


def test_expand_curve_is_deterministic_inverse_cdf() -> None:
    cdf = np.linspace(0, 100, 11)
    x = np.linspace(0, 10, 11)  # uniform on 0..10
    s = expand_curve(cdf, x, n=1000)
    assert s.size == 1000 and np.all(np.diff(s) >= 0)
    assert np.median(s) == pytest.approx(5.0, abs=0.01)
    assert np.array_equal(s, expand_curve(cdf, x, n=1000))
    wobbly = expand_curve(np.array([0, 50, 40, 100.0]), np.array([0, 5, 4, 10.0]), n=10)
    assert np.all(np.diff(wobbly) >= 0)  # not monotone: made so
    table = expand_curves(pa.table({"cdf_pct": cdf, "u": x * 10}), n=100, names={"u": "duty"})
    assert table.column_names == ["duty"] and table.num_rows == 100
    with pytest.raises(ValueError, match="at least one"):
        expand_curve(np.array([np.nan]), np.array([1.0]))


def test_the_preset_maps_acme_files_by_name() -> None:
    preset = get_preset("acme-nsdi24")
    util = preset("util_gpu_kalos_full.csv")
    assert isinstance(util, CurveMap) and util.kind is Kind.GPU
    assert preset("gpu_power_seren.csv") is not None
    assert preset("ib_seren.csv") is None and preset("server_power.csv") is None


def test_curves_become_samples_with_labels_and_times() -> None:
    mapping = get_preset("acme-nsdi24")("util_gpu_seren.csv")
    assert isinstance(mapping, CurveMap)
    (table,) = parse_curves(CURVES.encode(), mapping, "dir/util_gpu_seren.csv", T0).values()
    assert table.num_rows == 1000
    assert table.column("ts").to_pylist()[:2] == [T0, T0 + 1_000_000_000]
    row = table.to_pylist()[500]  # p = 50.05 %: just past the curves' 50 % point
    assert row["source"] == "acme-nsdi24" and row["cluster"] == "seren"
    assert row["curves"] == "util_gpu_seren"
    assert row["gpu_util_ratio"] == pytest.approx((90 + 10 * 0.05 / 50) / 100)
    assert row["sm_active_ratio"] == pytest.approx((40 + 40 * 0.05 / 50) / 100)
    assert "tensor_active_ratio" not in table.column_names  # a curve the file does not have


def test_curve_errors_name_the_file() -> None:
    mapping = CurveMap((CurveColumn("gpu_util", "gpu_util_ratio", 0.01),))
    with pytest.raises(CsvImportError, match=r"x\.csv.*cdf_pct"):
        parse_curves(b"p,gpu_util\n0,1\n", mapping, "x.csv", T0)
    with pytest.raises(CsvImportError, match=r"x\.csv.*none of the curves"):
        parse_curves(b"cdf_pct,other\n0,1\n", mapping, "x.csv", T0)
    with pytest.raises(CsvImportError, match="carry no time"):
        parse_csv_table(CURVES.encode(), lambda _name: mapping, "x.csv")
    with pytest.raises(ConfigError, match="not a catalog metric"):
        CurveMap((CurveColumn("a", "no_such_metric"),))


def test_ingest_stamps_curves_from_the_given_time(tmp_path: Path) -> None:
    src = tmp_path / "util_gpu_philly.csv"
    src.write_text("cdf_pct,gpu_util\n0,0\n100,100\n")
    cfg = load_config(None, env={}, overrides={"data_dir": str(tmp_path / "store")})
    result = ingest(cfg, [src], None, "here", T0, preset="acme-nsdi24")
    assert (result.files, result.readings, result.rows_by_kind) == (1, 1000, {"gpu": 1000})
    with Store(cfg.data_dir) as store:
        row = store.query(
            "SELECT min(epoch_ns(ts)) AS t0, count(*) AS n, any_value(cluster) AS c, "
            "any_value(host) AS h FROM gpu"
        ).to_pylist()[0]
    assert row == {"t0": T0, "n": 1000, "c": "philly", "h": None}
