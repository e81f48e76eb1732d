"""Reading CSV bytes, files, gzip and tar archives into reading tables."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.collect.csv_import import CsvImportError, column_map_from_options, parse_csv_table
from gpulens.collect.csv_import import reader as reader_module
from gpulens.collect.csv_import.presets import get_preset
from gpulens.model import Kind

CSV = b"""time,node,gpu,util,mem_mib,qps
2026-11-29T14:00:00Z,n1,0,50,1024,3.5
2026-11-29T14:00:01Z,n1,0,,2048,
2026-11-29T14:00:02Z,n2,1,100,,1
"""

MAP = column_map_from_options(
    "time",
    ["util=gpu_util_ratio:percent", "mem_mib=memory_used_bytes:mib", "qps=app_samples_per_second"],
    ["node=host", "gpu=gpu_index"],
)
T0 = 1_795_960_800_000_000_000


def test_columns_map_to_kinds_units_and_nulls() -> None:
    out = parse_csv_table(CSV, MAP, "x.csv")
    gpu = out[Kind.GPU].to_pydict()
    assert gpu["ts"] == [T0, T0 + 10**9, T0 + 2 * 10**9]
    assert gpu["host"] == ["n1", "n1", "n2"]
    assert gpu["gpu_util_ratio"] == [0.5, None, 1.0]
    assert gpu["memory_used_bytes"] == [2**30, 2**31, None]
    app = out[Kind.APP].to_pydict()
    assert app["ts"] == [T0, T0 + 2 * 10**9]  # the row without qps is not an app reading
    assert app["app_samples_per_second"] == [3.5, 1.0]


def test_host_fill_and_constants() -> None:
    m = column_map_from_options("time", ["util=gpu_util_ratio:percent"], sets=["source=lab"])
    gpu = parse_csv_table(CSV, m, "x.csv", host="here")[Kind.GPU].to_pydict()
    assert gpu["host"] == ["here", "here"] and gpu["source"] == ["lab", "lab"]


def test_gzip_and_tar_archives(tmp_path: Path) -> None:
    gz = tmp_path / "a.csv.gz"
    gz.write_bytes(gzip.compress(CSV))
    plain = parse_csv_table(CSV, MAP, "x")[Kind.GPU]
    assert parse_csv_table(gz, MAP)[Kind.GPU].equals(plain)
    tgz = tmp_path / "b.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name in ("one.csv", "two.csv", "notes.txt"):
            info = tarfile.TarInfo(name)
            info.size = len(CSV)
            tar.addfile(info, io.BytesIO(CSV))
    out = parse_csv_table(tgz, MAP)[Kind.GPU]
    assert out.num_rows == 2 * plain.num_rows


def test_small_blocks_give_the_same_table_and_row_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [b"time,util"] + [f"{1_700_000_000 + i},{i % 100}".encode() for i in range(5000)]
    data = b"\n".join(lines) + b"\n"
    m = column_map_from_options("time", ["util=gpu_util_ratio:percent"])
    whole = parse_csv_table(data, m, "x")[Kind.GPU]
    monkeypatch.setattr(reader_module, "BLOCK_SIZE", 4096)
    blocks = parse_csv_table(data, m, "x")[Kind.GPU]
    assert blocks.column("ts").equals(whole.column("ts"))
    bad = data.replace(b"1700004000,0", b"1700004000,zero")
    with pytest.raises(CsvImportError) as err:
        parse_csv_table(bad, m, "x")
    assert err.value.row == 4001 and err.value.column == "util"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"time,other\n1,2\n", "mapped column is missing"),
        (b"time,util\n1,2,3\n", "malformed"),
        (b"time,util\n2026-11-29T14:00:00Z,5\n,6\n", "timestamp is empty"),
    ],
)
def test_bad_files_raise_one_typed_error(data: bytes, problem: str) -> None:
    m = column_map_from_options("time", ["util=gpu_util_ratio:percent"])
    with pytest.raises(CsvImportError, match=problem) as err:
        parse_csv_table(data, m, "bad.csv")
    assert "bad.csv" in str(err.value)


def test_damaged_archive_and_missing_file(tmp_path: Path) -> None:
    m = column_map_from_options("time", ["util=gpu_util_ratio:percent"])
    tgz = tmp_path / "t.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo("a.csv")
        info.size = len(CSV)
        tar.addfile(info, io.BytesIO(CSV))
    tgz.write_bytes(tgz.read_bytes()[:-40])
    with pytest.raises(CsvImportError):
        parse_csv_table(tgz, m)
    with pytest.raises(CsvImportError, match="cannot open"):
        parse_csv_table(tmp_path / "missing.csv", m)


def test_preset_on_alibaba_layout() -> None:
    duty = b"value,timestamp_anon,container_ip\n0.0,1662858720.0,aa\n57.5,1662858777.0,bb\n"
    out = parse_csv_table(duty, get_preset("alibaba-genai-2026"), "pod_gpu_duty_cycle_anon.csv")
    gpu = out[Kind.GPU]
    assert gpu.column("gpu_util_ratio").to_pylist() == [0.0, 0.575]
    assert gpu.column("pod").to_pylist() == ["aa", "bb"] == gpu.column("gpu_uuid").to_pylist()
    assert "host" not in gpu.column_names
    assert pa.types.is_int64(gpu.column("ts").type)
    assert gpu.column("ts").to_pylist() == [1662858720 * 10**9, 1662858777 * 10**9]
