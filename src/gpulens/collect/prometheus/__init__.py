"""The Prometheus source: GPU telemetry read back from a site's Prometheus (or Thanos, Mimir,
VictoriaMetrics) through the HTTP API v1, downsampled on the server at the analysis step.

Public API (fetch in `client`, pure parse in `parse`, `tables`, `cluster`, `plan`):

- `read_range(url, start_s, end_s, step_s, mapping=None, *, auth=None, transfer=None,
  limits=None, selector="", transport=None) -> PromRange`: one call, one range. Raises
  `CollectError` when the range holds no GPU series at all.
- `PrometheusSource(url, mapping=None, *, auth, transfer, limits, selector, scrape_s,
  transport)`: the same for repeated reads (a dashboard refreshing a window):
  `.read(start_s, end_s, step_s) -> PromRange`, `.present(start_s, end_s) -> set[str]`,
  `.query(name, agg, lo, hi, step_s) -> list[Series]`, `.close()`.
- `PromRange`: `tables.gpu` and `tables.process` (pyarrow Tables in the layout
  `store.SegmentWriter.append_table` takes: `ts` in epoch ns at each step's start, string
  labels, float metrics in base units, null = no data), `tables.node_queues`, `sequence` (the
  Kueue cluster sequence, `gpulens.cluster_schema`), `notes` (what is missing and what it
  costs), `family`, `requests`, `bytes_read`, `points`.
- `iter_readings(tables) -> Iterator[Reading]` for callers that take readings.
- `SeriesMap` (`gpulens.series_catalog`): series names and label candidates;
  `SeriesMap().with_overrides(labels=["host=node"], series=["my_util=gpu_util_ratio:percent"])`
  for sites that relabel. `Auth(bearer_token, username, password, ca_file, verify)`,
  `Transfer(timeout_s, max_bytes, retries, backoff_s)`, `QueryLimits(max_points, max_samples)`.
"""

from gpulens.collect.prometheus.client import Auth, PrometheusClient, TooLarge, Transfer
from gpulens.collect.prometheus.parse import PrometheusFormatError, Series
from gpulens.collect.prometheus.plan import QueryLimits
from gpulens.collect.prometheus.source import (
    PrometheusSource,
    PromRange,
    iter_readings,
    read_range,
)
from gpulens.collect.prometheus.tables import ReadingTables
from gpulens.series_catalog import SeriesMap

__all__ = [
    "Auth",
    "PromRange",
    "PrometheusClient",
    "PrometheusFormatError",
    "PrometheusSource",
    "QueryLimits",
    "ReadingTables",
    "Series",
    "SeriesMap",
    "TooLarge",
    "Transfer",
    "iter_readings",
    "read_range",
]
