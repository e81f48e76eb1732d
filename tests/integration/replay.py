"""Real captures replayed as series: copies of one nvidia-smi XML dump with their
`<timestamp>` (and file time) moved to given instants, and a `--query-gpu ... -l 5` CSV log
built from a capture's query-gpu section. Times are written in UTC, as `--tz UTC` reads them."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpulens.app.analysis import report
from gpulens.app.ingest import ingest
from gpulens.config import Config, load_config
from gpulens.present.reports.fleet import to_json

NS = 1_000_000_000
T0 = 1_785_000_000 * NS  # 2026-07-25 17:20:00 UTC, a minute boundary
TELEMETRY = "data/telemetry"
XML = f"{TELEMETRY}/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata"
CAPTURES = f"{TELEMETRY}/utkuozdemir_nvidia_gpu_exporter/internal/captures"
_TIMESTAMP = re.compile(r"<timestamp>[^<]*</timestamp>")


def nvsmi_time(ns: int) -> str:
    """`Fri Aug  4 11:44:30 2023`: how nvidia-smi -q -x writes a time (here in UTC)."""
    d = datetime.fromtimestamp(ns / NS, UTC)
    return f"{d:%a %b} {d.day:2d} {d:%H:%M:%S %Y}"


def csv_time(ns: int) -> str:
    """`2026/07/03 08:33:38.737`: the `timestamp` field of --query-gpu (here in UTC)."""
    d = datetime.fromtimestamp(ns / NS, UTC)
    return f"{d:%Y/%m/%d %H:%M:%S}.{d.microsecond // 1000:03d}"


def xml_series(
    src: Path, times: Sequence[int], out: Path, drop_mig: Sequence[int] = ()
) -> list[Path]:
    """One copy of the XML dump `src` per instant of `times` (ns), its `<timestamp>` and file
    time set to it; `drop_mig` removes those `<mig_device>` entries (by position)."""
    text = src.read_text(encoding="utf-8")
    if drop_mig:
        blocks = re.findall(r"\s*<mig_device>.*?</mig_device>", text, flags=re.S)
        for i in drop_mig:
            text = text.replace(blocks[i], "", 1)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, ts in enumerate(times):
        path = out / f"{src.stem}-{i:03d}.xml"
        path.write_text(
            _TIMESTAMP.sub(f"<timestamp>{nvsmi_time(ts)}</timestamp>", text, count=1),
            encoding="utf-8",
        )
        os.utime(path, ns=(ts, ts))
        paths.append(path)
    return paths


def query_gpu_log(capture: Path, times: Sequence[int], out: Path) -> Path:
    """A `nvidia-smi --query-gpu=timestamp,... --format=csv -l N` log: the header and the idle
    row of `capture`'s query-gpu section, one row per instant of `times`. File time: the
    first instant."""
    lines = capture.read_text(encoding="utf-8").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("timestamp,"))
    header, row = lines[at], lines[at + 1]
    rest = row.split(",", 1)[1]
    body = [f"{csv_time(ts)},{rest}" for ts in times]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    os.utime(out, ns=(times[0], times[0]))
    return out


def config(data_dir: Path) -> Config:
    return load_config(None, env={}, overrides={"data_dir": str(data_dir)})


def ingest_and_report(data_dir: Path, paths: Sequence[Path], host: str = "vm") -> dict[str, Any]:
    """`gpulens ingest` of `paths` (each file's own time) then `gpulens report --format json`."""
    cfg = config(data_dir)
    ingest(cfg, list(paths), None, host, None)
    doc: dict[str, Any] = json.loads(to_json(report(cfg)))
    return doc
