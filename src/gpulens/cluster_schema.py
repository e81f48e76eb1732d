"""The cluster sequence: the one table every scheduler source hands the fleet analysis.

Long form, one row per queue and time step: ``ts_s`` (int64, UTC epoch seconds, the step's
start), ``queue`` (string), ``total_gpus``, ``in_use_gpus`` and ``pending_gpus`` (float64; the
mean over the step; null where the source does not know). A sequence CSV, a job log, Slurm or
Kubernetes (and a Prometheus range, one day) all become this table, so the analysis sees one
shape whatever the source.
"""

from __future__ import annotations

import pyarrow as pa

TS = "ts_s"
QUEUE = "queue"
TOTAL = "total_gpus"
IN_USE = "in_use_gpus"
PENDING = "pending_gpus"

SEQUENCE_SCHEMA = pa.schema(
    [
        pa.field(TS, pa.int64()),
        pa.field(QUEUE, pa.string()),
        pa.field(TOTAL, pa.float64()),
        pa.field(IN_USE, pa.float64()),
        pa.field(PENDING, pa.float64()),
    ]
)

# a job table (job logs, Slurm, Kubernetes): times are UTC epoch seconds, NaN where unknown
JOB_ID = "job_id"
USER = "user"
TEAM = "team"  # Slurm account, Kubernetes namespace, a job log's team column
STATE = "state"
GPUS = "gpus"
SUBMIT = "submit_s"
START = "start_s"
END = "end_s"
NODES = "nodes"

JOB_SCHEMA = pa.schema(
    [
        pa.field(JOB_ID, pa.string()),
        pa.field(QUEUE, pa.string()),
        pa.field(USER, pa.string()),
        pa.field(TEAM, pa.string()),
        pa.field(STATE, pa.string()),
        pa.field(GPUS, pa.float64()),
        pa.field(SUBMIT, pa.float64()),
        pa.field(START, pa.float64()),
        pa.field(END, pa.float64()),
        pa.field(NODES, pa.string()),
    ]
)

# a node table (Slurm nodes, sinfo): GPUs per node and those in use; `queues` comma-separated
NODE = "node"
NODE_STATE = "node_state"
USED = "used_gpus"
QUEUES = "queues"

NODE_SCHEMA = pa.schema(
    [
        pa.field(NODE, pa.string()),
        pa.field(NODE_STATE, pa.string()),
        pa.field(GPUS, pa.float64()),
        pa.field(USED, pa.float64()),
        pa.field(QUEUES, pa.string()),
    ]
)
