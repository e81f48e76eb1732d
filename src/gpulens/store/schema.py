"""The table schema of each reading kind, and how values are rounded and encoded on disk.

Columns of a stored table:

- `ts`: `timestamp[ns]` without a time zone, always UTC. DuckDB reads it as TIMESTAMP_NS, so
  `date_trunc('hour', ts)` and `time_bucket(...)` work directly and fast (a zone-aware column
  makes DuckDB's truncation go through ICU and runs ~3× slower); values are exact nanoseconds.
- label columns (`host`, `gpu_uuid`, ... in `LABEL_KEYS` order, then any extra label names
  sorted): strings, dictionary-encoded; null where a row has no such label.
- one column per metric present in the batch: float, null where a row has no value (never 0).
  Each value is rounded to its catalog `resolution`. A gauge whose rounded values stay within
  2**22 steps of resolution is stored as float32 (exact to a quarter of the resolution),
  otherwise as float64; counters are float64 (exact). Metrics unknown to the catalog are
  float64, unrounded.

Encodings (measured on simulated H100 fleet telemetry, see docs/storage.md): zstd, except in
a writer's segments (LZ4_RAW: compaction rewrites them soon, and it costs half the CPU);
dictionary for labels and gauges; DELTA_BINARY_PACKED for `ts`; BYTE_STREAM_SPLIT for counters;
rows sorted by (labels, ts) so each series is contiguous.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.catalog import METRICS, metrics_of
from gpulens.errors import StoreError
from gpulens.model import LABEL_KEYS, Kind

TS = "ts"
DATE = "date"  # the hive partition column readers see; never a stored column
RESERVED = frozenset({TS, DATE})
TS_TYPE = pa.timestamp("ns")
LABEL_TYPE = pa.dictionary(pa.int32(), pa.string())
FLOAT32_MAX_STEPS = 2**22
ROW_GROUP_ROWS = 1 << 20
ZSTD_LEVEL = 3
#: the codec of a writer's segments: half zstd 3's CPU, the same size for 10 s flushes and up to
#: 16 % more for 300 s ones, until compaction rewrites them as zstd (docs/storage.md)
SEGMENT_CODEC = "lz4"

_LABEL_ORDER = {k: i for i, k in enumerate(LABEL_KEYS)}


def label_order(names: Iterable[str]) -> list[str]:
    """Label columns in storage order: `LABEL_KEYS` order first, then extras sorted."""
    return sorted(names, key=lambda n: (_LABEL_ORDER.get(n, len(LABEL_KEYS)), n))


def metric_order(names: Iterable[str]) -> list[str]:
    """Metric columns in storage order: catalog metrics first (sorted), then others sorted."""
    return sorted(names, key=lambda n: (n not in METRICS, n))


def is_label_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def split_columns(table: pa.Table) -> tuple[list[str], list[str]]:
    """(label columns, metric columns) of an incoming table; StoreError on what cannot be stored."""
    if TS not in table.column_names:
        raise StoreError(
            f"a table for the store needs a {TS!r} column (UTC nanoseconds); got columns "
            f"{table.column_names!r}"
        )
    labels: list[str] = []
    metrics: list[str] = []
    for field in table.schema:
        name, t = field.name, field.type
        if name == TS:
            if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
                raise StoreError(f"column 'ts' must be int64 nanoseconds or a timestamp, got {t}")
        elif name == DATE:
            raise StoreError(
                "column name 'date' is reserved (it is the day partition readers see); "
                "rename the label or metric"
            )
        elif name in _LABEL_ORDER or is_label_type(t):
            labels.append(name)
        elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            metrics.append(name)
        elif pa.types.is_null(t):
            continue
        else:
            raise StoreError(
                f"column {name!r} has type {t}; the store keeps string labels and numeric "
                f"metric values only"
            )
    return label_order(labels), metric_order(metrics)


def ts_ns(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A `ts` column as int64 nanoseconds."""
    t = column.type
    if pa.types.is_timestamp(t) and t.unit != "ns":
        column = column.cast(pa.timestamp("ns", tz=t.tz))
    return np.asarray(column.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Rounding:
    """How a catalog metric is rounded: to steps of `1 / scale` when `per_unit` (multiplied by
    `scale`, rounded, divided: one correctly rounded division, so 1234.567, not
    1234.56700001), else to steps of `scale` (divided, rounded, multiplied)."""

    scale: float
    per_unit: bool
    gauge: bool


@cache
def rounding(name: str) -> Rounding | None:
    """The rounding of metric `name` from its catalog resolution (None: unknown, unrounded)."""
    metric = METRICS.get(name)
    if metric is None:
        return None
    res = metric.resolution
    per_unit = round(1.0 / res)
    exact = res < 1.0 and abs(per_unit * res - 1.0) < 1e-12
    return Rounding(float(per_unit) if exact else res, exact, metric.type == "gauge")


def round_metric(name: str, values: np.ndarray) -> pa.Array:
    """Round float64 `values` (NaN = absent) to the catalog resolution of metric `name`."""
    nulls = np.isnan(values)
    rule = rounding(name)
    if rule is None:
        return pa.array(values, type=pa.float64(), mask=nulls)
    if rule.per_unit:
        steps = np.round(values * rule.scale)
        rounded = steps / rule.scale
    else:
        steps = np.round(values / rule.scale)
        rounded = steps * rule.scale
    if rule.gauge:
        biggest = np.nanmax(np.abs(steps)) if not nulls.all() else 0.0
        if biggest <= FLOAT32_MAX_STEPS:
            return pa.array(rounded.astype(np.float32), type=pa.float32(), mask=nulls)
    return pa.array(rounded, type=pa.float64(), mask=nulls)


def _float_values(column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count:
        column = column.cast(pa.float64()).fill_null(float("nan"))
    return np.asarray(column.to_numpy(), dtype=np.float64)


def normalize(table: pa.Table) -> pa.Table:
    """The storage form of `table`: typed, rounded, all-null metric columns dropped, sorted.

    The result has `ts` (timestamp[ns]), labels (dictionary strings) and metrics (float32 or
    float64), sorted by (labels..., ts).
    """
    labels, metrics = split_columns(table)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        TS: pa.array(ts_ns(table.column(TS)), type=pa.int64()).cast(TS_TYPE)
    }
    for name in labels:
        col = table.column(name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        columns[name] = col.cast(pa.string())
    for name in metrics:
        col = table.column(name)
        if col.null_count == len(col):
            continue
        columns[name] = round_metric(name, _float_values(col.cast(pa.float64())))
    out = pa.table(columns)
    if out.num_rows > 1:
        keys = [(n, "ascending", "at_end") for n in [*labels, TS]]
        out = out.take(pc.sort_indices(out, sort_keys=keys))
    for name in labels:
        index = out.schema.get_field_index(name)
        out = out.set_column(index, name, out.column(name).dictionary_encode())
    return out


def write_options(
    table: pa.Table, *, codec: str = "zstd", zstd_level: int = ZSTD_LEVEL
) -> dict[str, object]:
    """`pyarrow.parquet.write_table` keyword arguments for a normalized table, compressed
    with `codec` ("zstd" at `zstd_level`, or "lz4", which pyarrow writes as LZ4_RAW)."""
    dictionary: list[str] = []
    encoding: dict[str, str] = {TS: "DELTA_BINARY_PACKED"}
    for field in table.schema:
        if field.name == TS:
            continue
        metric = METRICS.get(field.name)
        if metric is not None and metric.type == "counter":
            encoding[field.name] = "BYTE_STREAM_SPLIT"
        else:
            dictionary.append(field.name)
    return {
        "compression": codec,
        "compression_level": zstd_level if codec == "zstd" else None,
        "use_dictionary": dictionary,
        "column_encoding": encoding,
        "row_group_size": ROW_GROUP_ROWS,
        "write_statistics": True,
    }


def empty_schema(kind: Kind) -> pa.Schema:
    """What an empty table of `kind` looks like: ts, every label key, every catalog metric."""
    fields = [pa.field(TS, TS_TYPE)]
    fields += [pa.field(k, pa.string()) for k in LABEL_KEYS]
    fields += [pa.field(m.name, pa.float64()) for m in metrics_of(kind)]
    return pa.schema(fields)
