"""`gpulens ingest`: stores captured files (dcgm-exporter pages, nvidia-smi XML or CSV) as
readings, through the same pure parsers the live collectors use, and telemetry other systems
exported as CSV (format ``csv``: a column map or a preset; see docs/importing.md).

Bounded and atomic: files are read as streams (gzip inflated on the fly) within the
`limits.*` settings, readings go to the store in batches of at most `TABLE_ROWS` rows, and
every segment of one ingest belongs to one `store.Commit`, so either every file is stored or,
after an error, nothing is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from gpulens.app.gpus import CAPTURE_TIME_EVENT
from gpulens.collect.capture_time import zone
from gpulens.collect.csv_import import ColumnMap, get_preset, iter_tables
from gpulens.collect.dcgm.parse import ParseResult, parse_exposition_lines
from gpulens.collect.inputs import Limits, numbered_lines, open_bounded
from gpulens.collect.nvidia_smi import iter_query_csv, parse_nvsmi_xml_stream
from gpulens.config import Config
from gpulens.errors import CollectError, ConfigError
from gpulens.model import Kind, Reading, event
from gpulens.store import Commit, SegmentWriter

FORMATS: tuple[str, ...] = ("dcgm-exporter", "nvidia-smi-xml", "nvidia-smi-csv", "csv")

#: rows of columnar tables (CSV imports) buffered before they are written as segments
TABLE_ROWS = 1_000_000
#: readings (captures) buffered before they are written as segments
READINGS = 100_000


@dataclass
class IngestResult:
    """What one ingest stored."""

    files: int = 0
    readings: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rows_by_kind: dict[str, int] = field(default_factory=dict)


def limits_of(cfg: Config) -> Limits:
    """The `limits.*` settings that bound what ingest reads."""
    return Limits(
        max_inflated_bytes=int(cfg.get("limits.max_inflated_bytes")),
        max_line_bytes=int(cfg.get("limits.max_line_bytes")),
        max_string_bytes=int(cfg.get("limits.max_string_bytes")),
        max_nesting=int(cfg.get("limits.max_nesting")),
    )


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


def ingest(
    cfg: Config,
    paths: Sequence[Path],
    fmt: str | None,
    host: str,
    ts_ns: int | None,
    column_map: ColumnMap | None = None,
    preset: str | None = None,
    tz: str | None = None,
) -> IngestResult:
    """Store every file in one commit: all of them, or (one bad file) nothing.

    Captures (dcgm-exporter, nvidia-smi) are stamped with their own time: nvidia-smi's XML
    `<timestamp>` and the `timestamp` field of `--query-gpu` (local time without a zone, read
    in `tz`, else the `ingest.timezone` setting), or exposition sample timestamps. A capture
    without a time is stamped `ts_ns`, or the file's modification time when None. Each file
    leaves a `capture_time` event saying which, for the report.

    Format ``csv`` (implied by `column_map` or `preset`) takes its timestamps from
    the data and needs exactly one of `column_map` (from --time-column/--label/--map/--set) or
    `preset` (a name in `gpulens.collect.csv_import.PRESETS`); `host` fills the host label of
    rows without one unless the preset says the data names no machine. Quantile-curve files
    (the ``acme-nsdi24`` preset) carry no time: their samples are stamped from `ts_ns`, or
    from the file's modification time when None, one `sample_step_s` apart.
    """
    limits = limits_of(cfg)
    tz_name = tz or str(cfg.get("ingest.timezone"))
    clock = _Clock(zone(tz_name), tz_name, ts_ns is not None)
    if column_map is not None or preset is not None or fmt == "csv":
        if fmt not in (None, "csv"):
            raise ConfigError(f"--map/--preset need --format csv, not --format {fmt}")
        if (column_map is None) == (preset is None):
            raise ConfigError(
                "--format csv needs either --preset NAME or a column map (--time-column and "
                "--map COLUMN=FIELD[:UNIT]), not both and not neither"
            )
        mapping = column_map if column_map is not None else get_preset(str(preset))
        for path in paths:
            if not path.is_file():
                raise ConfigError(f"cannot read {str(path)!r}: not a file")
    result = IngestResult()
    with Commit(cfg.data_dir) as commit:
        writer = SegmentWriter(cfg.data_dir, host, commit=commit)
        for path in paths:
            stamp = _stamp(path, ts_ns)
            if column_map is not None or preset is not None:
                tables = iter_tables(
                    path, mapping, str(path), host=host, ts_ns=stamp, limits=limits
                )
                _store_tables(writer, tables, result)
            else:
                readings = _capture(path, fmt, host, stamp, limits, result, clock)
                _store_readings(writer, readings, result)
            result.files += 1
        writer.close()
        commit.commit()
    return result


def _stamp(path: Path, ts_ns: int | None) -> int:
    if ts_ns is not None:
        return ts_ns
    try:
        return path.stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror}") from None


def _store_tables(
    writer: SegmentWriter, tables: Iterable[tuple[Kind, pa.Table]], result: IngestResult
) -> None:
    for kind, table in tables:
        writer.append_table(kind, table)
        rows = int(table.num_rows)
        result.readings += rows
        result.rows_by_kind[kind.value] = result.rows_by_kind.get(kind.value, 0) + rows
        if writer.buffered_rows() >= TABLE_ROWS:
            writer.flush()


def _store_readings(
    writer: SegmentWriter, readings: Iterable[Reading], result: IngestResult
) -> None:
    batch: list[Reading] = []
    for reading in readings:
        batch.append(reading)
        if len(batch) >= READINGS:
            writer.append(batch)
            writer.flush()
            result.readings += len(batch)
            batch = []
    writer.append(batch)
    result.readings += len(batch)


@dataclass(frozen=True, slots=True)
class _Clock:
    """How captures get their time: the zone nvidia-smi times are read in, and whether a
    fallback time was given (--time) rather than taken from the file."""

    tz: tzinfo
    tz_name: str
    given: bool

    def event(self, readings: list[Reading], fallback: int, host: str, own: str) -> Reading:
        """The `capture_time` event of one file: `own` when its readings carry a time of
        their own (not `fallback`), else which fallback stamped them."""
        ts = readings[0].ts if readings else fallback
        if ts != fallback:
            message = own
        elif self.given:
            message = "no time in the capture: stamped with --time"
        else:
            message = (
                "no time in the capture: stamped with the file's modification time "
                "(pass --time with the capture's time)"
            )
        return event(ts, CAPTURE_TIME_EVENT, message, {"host": host, "source": "ingest"})

    @property
    def nvsmi(self) -> str:
        return (
            f"time from the captures' nvidia-smi timestamps, local time read as {self.tz_name} "
            "(set --tz or ingest.timezone to the zone where nvidia-smi ran)"
        )


def _capture(
    path: Path,
    fmt: str | None,
    host: str,
    ts_ns: int,
    limits: Limits,
    result: IngestResult,
    clock: _Clock,
) -> Iterator[Reading]:
    """The readings of one captured file, read as a bounded stream, and its `capture_time`
    event."""
    source = str(path)
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {source!r}: {exc.strerror}") from None
    with raw:
        stream = open_bounded(raw, source, limits, lambda detail: _damaged(source, detail))
        kind = fmt or detect_format(stream.peek(4096)[:4096].decode("utf-8", "replace"), source)
        if kind == "csv":
            raise ConfigError("--format csv needs --preset or --time-column with --map options")
        if kind == "dcgm-exporter":
            page = parse_exposition_lines(
                _text_lines(stream, source, limits), source, ts_ns, host, limits, True
            )
            _check_page(page, source)
            for reason, n in page.skipped.items():
                result.skipped[reason] = result.skipped.get(reason, 0) + n
            yield from page.readings
            own = "time from the pages' sample timestamps (UTC)"
            yield clock.event(page.readings, ts_ns, host, own)
        elif kind == "nvidia-smi-xml":
            readings = parse_nvsmi_xml_stream(stream, source, ts_ns, host, limits, clock.tz)
            if not any(r.kind is Kind.GPU for r in readings):
                raise CollectError(
                    f"{source}: the nvidia-smi XML holds no <gpu>: nothing to store (a machine "
                    "without GPUs, or output cut short); capture `nvidia-smi -q -x` again"
                )
            yield from readings
            yield clock.event(readings, ts_ns, host, clock.nvsmi)
        elif kind == "nvidia-smi-csv":
            first: list[Reading] = []
            for reading in iter_query_csv(
                _text_lines(stream, source, limits), source, ts_ns, host, clock.tz
            ):
                if not first:
                    first.append(reading)
                yield reading
            yield clock.event(first, ts_ns, host, clock.nvsmi)
        else:
            raise ConfigError(f"unknown format {kind!r}: use one of {', '.join(FORMATS)}")


def _text_lines(stream: BinaryIO, source: str, limits: Limits) -> Iterator[tuple[int, str]]:
    for number, line in numbered_lines(stream, source, limits):
        yield number, line.decode("utf-8", "replace")


def _check_page(page: ParseResult, source: str) -> None:
    """Refuse a page with no GPU reading: empty, or every series kept out."""
    if any(r.kind is Kind.GPU for r in page.readings):
        return
    if not page.skipped:
        raise CollectError(
            f"{source}: the page holds no samples (an empty or cut-off scrape); capture "
            "dcgm-exporter's /metrics again"
        )
    kept_out = ", ".join(f"{n} {reason}" for reason, n in sorted(page.skipped.items()))
    raise CollectError(
        f"{source}: none of the page's series is a GPU reading gpulens stores ({kept_out}); "
        "check that it is a dcgm-exporter page"
    )


def _damaged(source: str, detail: str) -> CollectError:
    return CollectError(f"cannot read {source}: {detail}; copy or capture the file again")
