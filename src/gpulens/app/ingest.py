"""`gpulens ingest`: stores captured files (dcgm-exporter pages, nvidia-smi XML or CSV) as
readings, through the same pure parsers the live collectors use, and telemetry other systems
exported as CSV (format ``csv``: a column map or a preset; see docs/importing.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from gpulens.collect.csv_import import ColumnMap, get_preset, parse_csv_table
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.collect.nvidia_smi import parse_nvsmi_xml, parse_query_csv
from gpulens.config import Config
from gpulens.errors import ConfigError
from gpulens.model import Kind, Reading
from gpulens.store import SegmentWriter

FORMATS: tuple[str, ...] = ("dcgm-exporter", "nvidia-smi-xml", "nvidia-smi-csv", "csv")


@dataclass
class IngestResult:
    """What one ingest stored."""

    files: int = 0
    readings: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rows_by_kind: dict[str, int] = field(default_factory=dict)


def detect_format(text: str, source: str) -> str:
    """The capture format of `text`, from its first meaningful line."""
    head = text.lstrip()[:4096]
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        return "nvidia-smi-xml"
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    if first.startswith("#") or first.startswith("DCGM_") or first.startswith("dcgm_"):
        return "dcgm-exporter"
    if "," in first and ("utilization" in first or "uuid" in first or "name" in first):
        return "nvidia-smi-csv"
    raise ConfigError(
        f"cannot tell the format of {source}: pass --format with one of {', '.join(FORMATS)}"
    )


def parse_capture(
    text: str, fmt: str, source: str, ts_ns: int, host: str
) -> tuple[list[Reading], dict[str, int]]:
    """Readings of one captured file; the parsers raise one typed error naming file and line."""
    if fmt == "dcgm-exporter":
        result = parse_exposition(text, source, ts_ns, default_host=host)
        return result.readings, dict(result.skipped)
    if fmt == "nvidia-smi-xml":
        return parse_nvsmi_xml(text, source, ts_ns, host), {}
    if fmt == "nvidia-smi-csv":
        return parse_query_csv(text, source, ts_ns, host), {}
    raise ConfigError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")


def ingest(
    cfg: Config,
    paths: Sequence[Path],
    fmt: str | None,
    host: str,
    ts_ns: int | None,
    column_map: ColumnMap | None = None,
    preset: str | None = None,
) -> IngestResult:
    """Parse every file first (one bad file stores nothing), then write them all.

    Captures (dcgm-exporter, nvidia-smi) are stamped `ts_ns`, or the file's modification time
    when None. Format ``csv`` (implied by `column_map` or `preset`) takes its timestamps from
    the data and needs exactly one of `column_map` (from --time-column/--label/--map/--set) or
    `preset` (a name in `gpulens.collect.csv_import.PRESETS`); `host` fills the host label of
    rows without one unless the preset says the data names no machine. Quantile-curve files
    (the ``acme-nsdi24`` preset) carry no time: their samples are stamped from `ts_ns`, or
    from the file's modification time when None, one `sample_step_s` apart.
    """
    if column_map is not None or preset is not None or fmt == "csv":
        if fmt not in (None, "csv"):
            raise ConfigError(f"--map/--preset need --format csv, not --format {fmt}")
        return _ingest_csv(cfg, paths, host, column_map, preset, ts_ns)
    batches: list[list[Reading]] = []
    result = IngestResult()
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            stamp = ts_ns if ts_ns is not None else path.stat().st_mtime_ns
        except OSError as exc:
            raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror}") from None
        kind = fmt or detect_format(text, str(path))
        if kind == "csv":
            raise ConfigError("--format csv needs --preset or --time-column with --map options")
        readings, skipped = parse_capture(text, kind, str(path), stamp, host)
        batches.append(readings)
        result.files += 1
        result.readings += len(readings)
        for reason, n in skipped.items():
            result.skipped[reason] = result.skipped.get(reason, 0) + n
    with SegmentWriter(cfg.data_dir, host) as writer:
        for readings in batches:
            writer.append(readings)
    return result


def _ingest_csv(
    cfg: Config,
    paths: Sequence[Path],
    host: str,
    column_map: ColumnMap | None,
    preset: str | None,
    ts_ns: int | None = None,
) -> IngestResult:
    if (column_map is None) == (preset is None):
        raise ConfigError(
            "--format csv needs either --preset NAME or a column map (--time-column and "
            "--map COLUMN=FIELD[:UNIT]), not both and not neither"
        )
    mapping = column_map if column_map is not None else get_preset(str(preset))
    parsed: list[dict[Kind, pa.Table]] = []
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"cannot read {str(path)!r}: not a file")
        stamp = ts_ns if ts_ns is not None else path.stat().st_mtime_ns
        parsed.append(parse_csv_table(path, mapping, str(path), host=host, ts_ns=stamp))
    result = IngestResult()
    with SegmentWriter(cfg.data_dir, host) as writer:
        for tables in parsed:
            result.files += 1
            for kind, table in tables.items():
                writer.append_table(kind, table)
                result.readings += table.num_rows
                result.rows_by_kind[kind.value] = (
                    result.rows_by_kind.get(kind.value, 0) + table.num_rows
                )
    return result
