"""Generic CSV importer: telemetry other systems exported (a timestamp column, entity label
columns, metric columns) mapped onto catalog metrics, with presets for published traces.

Pure parse: bytes or files in, pyarrow tables per reading kind out; storing is the caller's job
(`gpulens.app.ingest`). docs/importing.md describes the options.
"""

from gpulens.collect.csv_import.curves import (
    CurveColumn,
    CurveMap,
    expand_curve,
    expand_curves,
    parse_curves,
    read_quantile_curves,
)
from gpulens.collect.csv_import.errors import CsvImportError
from gpulens.collect.csv_import.mapping import (
    TIME_UNITS,
    UNITS,
    ColumnMap,
    MetricColumn,
    column_map_from_options,
    parse_label_option,
    parse_map_option,
    parse_set_option,
)
from gpulens.collect.csv_import.presets import PRESETS, Preset, get_preset
from gpulens.collect.csv_import.reader import iter_tables, parse_csv_table

__all__ = [
    "PRESETS",
    "TIME_UNITS",
    "UNITS",
    "ColumnMap",
    "CsvImportError",
    "CurveColumn",
    "CurveMap",
    "MetricColumn",
    "Preset",
    "column_map_from_options",
    "expand_curve",
    "expand_curves",
    "get_preset",
    "iter_tables",
    "parse_csv_table",
    "parse_curves",
    "parse_label_option",
    "parse_map_option",
    "parse_set_option",
    "read_quantile_curves",
]
