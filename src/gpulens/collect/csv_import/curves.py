"""Read published quantile (CDF) curves, such as the Acme NSDI'24 ``util_cdf_csv`` files.

The file has a ``cdf_pct`` column (0..100) and one column of metric values per curve;
`gpulens.analyze.fleet.expand_curves` turns it into representative samples.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from gpulens.collect.csv_import.errors import CsvImportError

CDF_COLUMN = "cdf_pct"


def read_quantile_curves(path: Path) -> pa.Table:
    """A table of float64 columns: ``cdf_pct`` and one per curve (CsvImportError otherwise)."""
    try:
        table = pacsv.read_csv(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise CsvImportError(str(path), f"cannot read the curves: {exc}") from None
    if CDF_COLUMN not in table.column_names:
        raise CsvImportError(
            str(path), f"a quantile-curve file needs a {CDF_COLUMN!r} column", column=CDF_COLUMN
        )
    cols: dict[str, pa.ChunkedArray] = {}
    for name in table.column_names:
        col = table.column(name)
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
            raise CsvImportError(
                str(path), f"curve values must be numbers, the column has {col.type}", column=name
            )
        cols[name] = col.cast(pa.float64())
    return pa.table(cols)
