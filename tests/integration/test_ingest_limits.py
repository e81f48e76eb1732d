"""`gpulens ingest` on bad and oversized captures (tests/corpus/captures.py) and real pages:
every input bounded by the `limits.*` settings, every bad one refused with one clear line, and
an ingest that fails midway stores nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.corpus.captures import CASES, INGEST_ARGS

import gpulens.app.ingest as ingest_module
import gpulens.collect.csv_import.reader as csv_reader
from gpulens.app.ingest import ingest
from gpulens.collect.csv_import import CsvImportError, column_map_from_options
from gpulens.collect.nvidia_smi import NvidiaSmiParseError
from gpulens.config import Config, load_config
from gpulens.errors import CollectError, GpulensError, InputTooLarge
from gpulens.store import Store

PAGE = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
XML = "data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata/a100-sxm4-v12.xml"
MAP = column_map_from_options("time", ["util=gpu_util_ratio:percent"], ["node=host"], [], "s")
TS = 1_795_953_600_000_000_000


def _cfg(tmp_path: Path, **limits: int) -> Config:
    env = {f"GPULENS_LIMITS_{k.upper()}": str(v) for k, v in limits.items()}
    return load_config(None, env=env, overrides={"data_dir": str(tmp_path / "store")})


def _stored(cfg: Config) -> list[Path]:
    return sorted(cfg.data_dir.rglob("*.parquet"))


def _case(name: str, tmp_path: Path, size: int) -> Path:
    make: Callable[[Path, int], Path] = CASES[name]
    return make(tmp_path, size)


def test_a_long_line_in_a_real_page_is_refused_with_its_line_and_setting(
    tmp_path: Path, shared: Path
) -> None:
    lines = (shared / PAGE).read_text().splitlines(keepends=True)
    lines.insert(3, "# HELP padding " + "x" * 5000 + "\n")
    page = tmp_path / "page.prom"
    page.write_text("".join(lines))
    cfg = _cfg(tmp_path, max_line_bytes=4096)
    with pytest.raises(InputTooLarge, match=r"page\.prom, line 4: .*limits\.max_line_bytes"):
        ingest(cfg, [page], None, "h", TS)
    assert not _stored(cfg)
    assert ingest(_cfg(tmp_path), [page], None, "h", TS).readings > 0  # default: 4 MiB


def test_a_huge_label_value_is_refused(tmp_path: Path, shared: Path) -> None:
    text = (shared / PAGE).read_text().replace('modelName="Tesla T4"', f'modelName="{"T" * 9000}"')
    page = tmp_path / "page.prom"
    page.write_text(text)
    cfg = _cfg(tmp_path, max_string_bytes=8192)
    with pytest.raises(InputTooLarge, match=r"label 'modelName'.*limits\.max_string_bytes"):
        ingest(cfg, [page], None, "h", TS)
    assert not _stored(cfg)


def test_a_gzip_bomb_stops_at_the_inflated_limit(tmp_path: Path) -> None:
    bomb = _case("gzip-bomb", tmp_path, 64 << 20)
    assert bomb.stat().st_size < 1 << 20
    cfg = _cfg(tmp_path, max_inflated_bytes=8 << 20, max_line_bytes=16 << 20)
    with pytest.raises(InputTooLarge, match=r"bomb\.csv\.gz: .*limits\.max_inflated_bytes"):
        ingest(cfg, [bomb], "csv", "h", None, column_map=MAP)
    with pytest.raises(InputTooLarge, match=r"bomb\.csv\.gz, line 1: .*limits\.max_line_bytes"):
        ingest(_cfg(tmp_path), [bomb], "csv", "h", None, column_map=MAP)


def test_a_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    bad = _case("corrupt-gzip", tmp_path, 1 << 20)
    with pytest.raises(CsvImportError, match=r"corrupt\.csv\.gz: the gzip data is damaged"):
        ingest(_cfg(tmp_path), [bad], "csv", "h", None, column_map=MAP)


@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        ("empty-prom", CollectError, "holds no samples"),
        ("nvsmi-name-uuid-csv", NvidiaSmiParseError, "names no field gpulens measures"),
        ("xml-not-utf8", NvidiaSmiParseError, r"line 6: the bytes are not UTF-8 \(byte 0xe9\)"),
        ("xml-xxe", NvidiaSmiParseError, "declares the entity 'id'"),
        ("xml-billion-laughs", NvidiaSmiParseError, "declares the entity 'l0'"),
        ("xml-deep", InputTooLarge, "limits.max_nesting"),
    ],
)
def test_bad_captures_are_refused_and_nothing_is_stored(
    case: str, error: type[GpulensError], message: str, tmp_path: Path, shared: Path
) -> None:
    path = _case(case, tmp_path, 4096)
    fmt = "dcgm-exporter" if case == "empty-prom" else None  # else detected from the content
    cfg = _cfg(tmp_path)
    with pytest.raises(error, match=message):
        ingest(cfg, [shared / PAGE, path], fmt, "h", TS)
    assert not _stored(cfg)


def test_a_declared_latin1_encoding_is_honoured(tmp_path: Path, shared: Path) -> None:
    raw = (shared / XML).read_bytes()
    assert raw.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
    raw = raw.replace(b'"UTF-8"', b'"ISO-8859-1"', 1).replace(
        b"NVIDIA A100-SXM4-80GB", "NVIDIA A100 \xe9dition".encode("latin-1")
    )
    path = tmp_path / "latin1.xml"
    path.write_bytes(raw)
    cfg = _cfg(tmp_path)
    ingest(cfg, [path], "nvidia-smi-xml", "h", TS)
    with Store(cfg.data_dir) as store:
        models = store.query("SELECT DISTINCT gpu_model FROM gpu").column(0).to_pylist()
    assert models == ["NVIDIA A100 \xe9dition"]


def test_a_large_csv_is_stored_in_batches_under_one_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _case("valid-csv-gz", tmp_path, 4 << 20)
    monkeypatch.setattr(ingest_module, "TABLE_ROWS", 50_000)
    monkeypatch.setattr(csv_reader, "BLOCK_SIZE", 1 << 20)
    cfg = _cfg(tmp_path)
    result = ingest(cfg, [src], "csv", "h", None, column_map=MAP)
    segments = _stored(cfg)
    assert result.readings > 200_000 and len(segments) >= 4  # written while reading
    assert all(f.name.startswith("txn-") for f in segments)
    with Store(cfg.data_dir) as store:
        assert store.tables()["gpu"] == result.readings


def test_an_error_after_several_batches_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = _case("valid-csv-gz", tmp_path, 4 << 20)
    bad = tmp_path / "bad.csv"
    bad.write_text("time,node,util\n1764424800,n1,50\n1764424801,n1,lots\n")
    monkeypatch.setattr(ingest_module, "TABLE_ROWS", 50_000)
    monkeypatch.setattr(csv_reader, "BLOCK_SIZE", 1 << 20)
    written: list[Path] = []
    flush = ingest_module.SegmentWriter.flush

    def counting_flush(self: ingest_module.SegmentWriter) -> list[Path]:
        out = flush(self)
        written.extend(out)
        return out

    monkeypatch.setattr(ingest_module.SegmentWriter, "flush", counting_flush)
    cfg = _cfg(tmp_path)
    with pytest.raises(CsvImportError, match=r"bad\.csv, row 2"):
        ingest(cfg, [good, bad], "csv", "h", None, column_map=MAP)
    assert len(written) >= 4  # segments were written before the bad row was read ...
    assert not _stored(cfg)  # ... and deleted with the commit
    with Store(cfg.data_dir) as store:
        assert store.tables()["gpu"] == 0


def test_the_cli_ends_a_bomb_with_the_clear_error_every_time(tmp_path: Path) -> None:
    bomb = _case("gzip-bomb", tmp_path, 64 << 20)
    env = dict(os.environ, GPULENS_LIMITS_MAX_LINE_BYTES=str(16 << 20))
    for _ in range(3):
        args = [str(bomb), *INGEST_ARGS["gzip-bomb"], "--data-dir", str(tmp_path / "store")]
        result = subprocess.run(
            [sys.executable, "-m", "gpulens", "ingest", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert result.returncode == InputTooLarge.exit_code, result.stderr
        assert "limits.max_line_bytes" in result.stderr
        assert "terminate called" not in result.stderr
