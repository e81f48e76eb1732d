"""`ingest(..., fmt="csv")`: column maps and presets into a store; one bad file stores nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.app.ingest import FORMATS, ingest
from gpulens.collect.csv_import import CsvImportError, column_map_from_options
from gpulens.config import Config, load_config
from gpulens.errors import ConfigError
from gpulens.store import Store

GOOD = "time,node,util\n2026-11-29T14:00:00Z,n1,50\n2026-11-29T14:00:10Z,n1,75\n"
MAP = column_map_from_options("time", ["util=gpu_util_ratio:percent"], ["node=host"])


def _cfg(tmp_path: Path) -> Config:
    return load_config(None, env={}, overrides={"data_dir": str(tmp_path / "store")})


def test_csv_with_a_column_map_is_stored(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text(GOOD)
    cfg = _cfg(tmp_path)
    result = ingest(cfg, [src], "csv", "here", None, column_map=MAP)
    assert (result.files, result.readings, result.rows_by_kind) == (1, 2, {"gpu": 2})
    with Store(cfg.data_dir) as store:
        rows = store.query("SELECT host, gpu_util_ratio FROM gpu ORDER BY ts").to_pylist()
    assert rows == [
        {"host": "n1", "gpu_util_ratio": 0.5},
        {"host": "n1", "gpu_util_ratio": 0.75},
    ]
    assert "csv" in FORMATS


def test_one_bad_file_stores_nothing(tmp_path: Path) -> None:
    good, bad = tmp_path / "a.csv", tmp_path / "b.csv"
    good.write_text(GOOD)
    bad.write_text("time,node,util\n2026-11-29T14:00:00Z,n1,lots\n")
    cfg = _cfg(tmp_path)
    with pytest.raises(CsvImportError, match=r"b\.csv"):
        ingest(cfg, [good, bad], "csv", "here", None, column_map=MAP)
    assert not list(cfg.data_dir.rglob("*.parquet"))


def test_csv_option_errors(tmp_path: Path) -> None:
    src = tmp_path / "a.csv"
    src.write_text(GOOD)
    cfg = _cfg(tmp_path)
    with pytest.raises(ConfigError, match="either --preset"):
        ingest(cfg, [src], "csv", "here", None)
    with pytest.raises(ConfigError, match="either --preset"):
        ingest(cfg, [src], None, "here", None, column_map=MAP, preset="alibaba-genai-2026")
    with pytest.raises(ConfigError, match="need --format csv"):
        ingest(cfg, [src], "dcgm-exporter", "here", None, column_map=MAP)
    with pytest.raises(ConfigError, match="unknown preset"):
        ingest(cfg, [src], None, "here", None, preset="nope")
