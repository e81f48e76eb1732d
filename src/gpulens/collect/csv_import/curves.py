"""Read published quantile (CDF) curves, such as the Acme NSDI'24 ``util_cdf_csv`` files, and
turn them into readings (the ``acme-nsdi24`` preset).

A curve file has a ``cdf_pct`` column (0..100) and one column of metric values per curve. A
`CurveMap` says which curve is which catalog metric; `parse_curves` expands every mapped curve
into `CurveMap.samples` representative values by inverse-CDF sampling on the fixed grid
p = (i + 0.5) / n (deterministic, ascending) and writes row i with the i-th value of each
curve. The columns are independent marginals: statistics of one metric (its median, its
quantiles) hold, joint ones (the duty cycle and the memory of the same moment) do not, and
the rows are no time series: row i is stamped `start_ns` + i × `sample_step_s` only to keep
the samples apart.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pacsv

from gpulens.catalog import METRICS
from gpulens.collect.csv_import.errors import CsvImportError
from gpulens.errors import ConfigError
from gpulens.model import Kind

CDF_COLUMN = "cdf_pct"
TS = "ts"
Floats = npt.NDArray[np.float64]


def read_quantile_curves(src: Path | bytes | IO[bytes], source: str | None = None) -> pa.Table:
    """A table of float64 columns: ``cdf_pct`` and one per curve (CsvImportError otherwise)."""
    name = source or (str(src) if isinstance(src, Path) else "<curves>")
    try:
        table = pacsv.read_csv(io.BytesIO(src) if isinstance(src, bytes) else src)
    except (OSError, pa.ArrowInvalid) as exc:
        raise CsvImportError(name, f"cannot read the curves: {exc}") from None
    if CDF_COLUMN not in table.column_names:
        raise CsvImportError(
            name, f"a quantile-curve file needs a {CDF_COLUMN!r} column", column=CDF_COLUMN
        )
    cols: dict[str, pa.ChunkedArray] = {}
    for col_name in table.column_names:
        col = table.column(col_name)
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
            raise CsvImportError(
                name, f"curve values must be numbers, the column has {col.type}", column=col_name
            )
        cols[col_name] = col.cast(pa.float64())
    return pa.table(cols)


def _floats(values: pa.ChunkedArray | pa.Array | Floats) -> Floats:
    if isinstance(values, pa.ChunkedArray | pa.Array):
        values = values.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64)


def expand_curve(
    cdf_pct: pa.ChunkedArray | pa.Array | Floats,
    values: pa.ChunkedArray | pa.Array | Floats,
    n: int = 1000,
) -> Floats:
    """`n` representative samples of a quantile curve (x at CDF percent), by inverse-CDF
    sampling on the fixed grid p = (i + 0.5) / n: deterministic, sorted ascending.

    Curves that are not monotone (digitised plots) are made so with a running maximum.
    """
    p, x = _floats(cdf_pct), _floats(values)
    ok = np.isfinite(p) & np.isfinite(x)
    p, x = p[ok], x[ok]
    if p.size == 0:
        raise ValueError("a quantile curve needs at least one (cdf, value) point")
    order = np.argsort(p, kind="stable")
    p, x = np.maximum.accumulate(p[order]), np.maximum.accumulate(x[order])
    grid = (np.arange(n, dtype=np.float64) + 0.5) / n * 100.0
    return np.asarray(np.interp(grid, p, x), dtype=np.float64)


def expand_curves(
    curves: pa.Table, n: int = 1000, names: Mapping[str, str] | None = None, scale: float = 1.0
) -> pa.Table:
    """Samples of every curve in `curves` (all columns but ``cdf_pct``), renamed by `names`
    and multiplied by `scale`; columns are independent marginals."""
    p = curves.column(CDF_COLUMN)
    return pa.table(
        {
            (names or {}).get(c, c): expand_curve(p, curves.column(c), n) * scale
            for c in curves.column_names
            if c != CDF_COLUMN
        }
    )


@dataclass(frozen=True, slots=True)
class CurveColumn:
    """Curve `column` holds catalog metric `field`; values × `factor` are in its base unit."""

    column: str
    field: str
    factor: float = 1.0


@dataclass(frozen=True, slots=True)
class CurveMap:
    """How a quantile-curve file becomes readings of one kind.

    `metrics` maps curve columns (a file need not have them all; unmapped ones are ignored).
    `constants` are labels every row gets; `name_labels` pairs (label key, regular expression
    with one group) matched against the file's stem (``util_gpu_seren``): the group is the
    label's value. Each file gives `samples` rows, `sample_step_s` apart from the start time.
    """

    metrics: tuple[CurveColumn, ...]
    constants: tuple[tuple[str, str], ...] = ()
    name_labels: tuple[tuple[str, str], ...] = ()
    samples: int = 1000
    sample_step_s: float = 1.0

    def __post_init__(self) -> None:
        kinds = set()
        for m in self.metrics:
            known = METRICS.get(m.field)
            if known is None or known.kind is Kind.EVENT:
                raise ConfigError(f"curve {m.column!r}: {m.field!r} is not a catalog metric")
            kinds.add(known.kind)
        if len(kinds) != 1:
            raise ConfigError("a curve map's metrics must all be of one reading kind")
        if self.samples < 1:
            raise ConfigError(f"a curve map needs at least one sample, got {self.samples}")

    @property
    def kind(self) -> Kind:
        return METRICS[self.metrics[0].field].kind


def parse_curves(
    src: Path | bytes | IO[bytes], mapping: CurveMap, source: str, start_ns: int
) -> dict[Kind, pa.Table]:
    """The readings table of one curve file: `mapping.samples` rows of the mapped curves."""
    curves = read_quantile_curves(src, source)
    mapped = [m for m in mapping.metrics if m.column in curves.column_names]
    if not mapped:
        wanted = ", ".join(m.column for m in mapping.metrics)
        raise CsvImportError(source, f"it has none of the curves the preset maps ({wanted})")
    n = mapping.samples
    step_ns = round(mapping.sample_step_s * 1e9)
    cols: dict[str, pa.Array] = {TS: pa.array(start_ns + np.arange(n) * step_ns, pa.int64())}
    stem = Path(source.split(":")[-1]).name.split(".")[0]
    labels = list(mapping.constants)
    for key, pattern in mapping.name_labels:
        found = re.search(pattern, stem)
        if found:
            labels.append((key, found.group(1)))
    for key, value in labels:
        cols[key] = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, dtype=np.int32)), pa.array([value])
        )
    for m in mapped:
        try:
            values = expand_curve(curves.column(CDF_COLUMN), curves.column(m.column), n)
        except ValueError as exc:
            raise CsvImportError(source, str(exc), column=m.column) from None
        cols[m.field] = pa.array(values * m.factor, pa.float64())
    return {mapping.kind: pa.table(cols)}
