"""The store: append-only Parquet segments per reading kind, queried with DuckDB.

Write with `SegmentWriter` (several segments made visible at once with a `Commit`), read with
`Store`, keep it tidy with `compact` and `apply_retention`. docs/storage.md describes the
layout, schema and protocols.
"""

from gpulens.store.commit import Commit, clean_commits
from gpulens.store.compact import CompactionResult, compact
from gpulens.store.maintenance import MaintenanceResult, MaintenanceThread, maintain
from gpulens.store.query import QueryError, Store
from gpulens.store.retention import apply_retention
from gpulens.store.segments import SegmentWriter, WriterStats

__all__ = [
    "Commit",
    "CompactionResult",
    "MaintenanceResult",
    "MaintenanceThread",
    "QueryError",
    "SegmentWriter",
    "Store",
    "WriterStats",
    "apply_retention",
    "clean_commits",
    "compact",
    "maintain",
]
