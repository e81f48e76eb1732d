"""The store in a bucket of a real S3-compatible server (moto's server mode, on loopback).

Three writer processes (each one node of the simulated fleet, through the real collector,
scheduler and segment writer) write into one bucket at once and compact their own files; one
report reads the whole fleet; a second, independent reader (pyarrow.dataset with hive
partitioning discovery) gets the same rows as DuckDB; a writer killed while its upload is in
flight leaves nothing visible; commits and retention keep their guarantees without rename.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto.server", reason="moto[server] runs the S3-compatible test server")
boto3 = pytest.importorskip("boto3", reason="boto3 inspects the bucket server-side")

import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

from gpulens.clock import FakeClock  # noqa: E402
from gpulens.model import Kind  # noqa: E402
from gpulens.store import (  # noqa: E402
    Commit,
    SegmentWriter,
    Store,
    apply_retention,
    clean_commits,
    maintain,
)
from gpulens.store.layout import NS_PER_DAY, day_of  # noqa: E402

WORKER = Path(__file__).with_name("s3_store_worker.py")
sys.path.insert(0, str(WORKER.parent))
from replay import XML  # noqa: E402
from s3_store_worker import GPUS_PER_HOST, HOSTS  # noqa: E402

SECONDS = 300  # simulated seconds each writer records (one tick a second)


@dataclass
class S3:
    """A running moto S3 server: its endpoint, the environment that points gpulens at it, and
    a boto3 client to look at the bucket from the server's side."""

    endpoint: str
    env: dict[str, str]
    client: Any

    def bucket(self) -> str:
        name = f"gpulens-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        creds = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        saved = {k: os.environ.get(k) for k in creds}
        os.environ.update(creds)
        try:
            yield S3(endpoint, {**os.environ, **creds}, client)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        server.stop()


@dataclass
class Fleet:
    url: str
    bucket: str
    reports: list[dict[str, Any]]


@pytest.fixture(scope="module")
def fleet(s3: S3) -> Fleet:
    """Three writers, started together, each recording one node and compacting its files."""
    bucket = s3.bucket()
    url = f"s3://{bucket}/fleet"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "agent", url, str(i), str(SECONDS)],
            env=s3.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(HOSTS)
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return Fleet(url, bucket, reports)


def test_three_writers_compact_their_own_files_and_one_report_reads_all(
    s3: S3, fleet: Fleet, tmp_path: Path
) -> None:
    keys = s3.keys(fleet.bucket)
    gpu_files = sorted(
        k.rsplit("/", 1)[-1] for k in keys if "/gpu/date=" in k and k.endswith("parquet")
    )
    # each writer flushed a segment a simulated minute, then merged its own into one file
    assert all(r["segments"] >= 5 * 4 and r["merged"] >= 5 * 4 for r in fleet.reports)
    assert [f.split("-")[1] for f in gpu_files] == ["sim_node_0", "sim_node_1", "sim_node_2"]
    assert all(f.startswith("cmp-") for f in gpu_files)

    with Store(fleet.url) as store:
        rows = store.query(
            "SELECT host, count(*) AS n, count(DISTINCT gpu_uuid) AS gpus, "
            "count(DISTINCT ts) AS ticks FROM gpu GROUP BY host ORDER BY host"
        ).to_pylist()
    assert [r["host"] for r in rows] == [f"sim-node-{i}" for i in range(HOSTS)]
    for r in rows:
        assert r["gpus"] == GPUS_PER_HOST
        assert r["ticks"] in (SECONDS, SECONDS + 1)  # one tick a second, both ends included
        assert r["n"] == r["gpus"] * r["ticks"]  # nothing twice, nothing missing

    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "--data-dir", fleet.url,
         "--format", "json", "-o", str(out)],
        env=s3.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    gpus = {(g["host"], g["gpu_uuid"]) for g in report["gpus"]}
    assert len(gpus) == HOSTS * GPUS_PER_HOST
    assert {h for h, _ in gpus} == {f"sim-node-{i}" for i in range(HOSTS)}


def test_pyarrow_dataset_discovery_reads_the_same_rows_as_duckdb(s3: S3, fleet: Fleet) -> None:
    """A second reader knows nothing of gpulens: it discovers the files and the hive `date`
    partition under the prefix itself (after compaction with no grace, every file is live)."""
    fs = pafs.S3FileSystem(
        endpoint_override=s3.endpoint.removeprefix("http://"),
        scheme="http",
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
    )
    root = f"{fleet.bucket}/fleet/gpu"
    found = pads.dataset(root, filesystem=fs, format="parquet", partitioning="hive")
    schema = pa.unify_schemas(
        [frag.physical_schema for frag in found.get_fragments()], promote_options="permissive"
    )
    schema = schema.append(pa.field("date", pa.date32()))
    found = pads.dataset(root, filesystem=fs, format="parquet", partitioning="hive", schema=schema)
    columns = ["ts", "host", "gpu_uuid", "sm_active_ratio", "power_watts", "energy_joules", "date"]
    plain = pa.schema(
        [("ts", pa.timestamp("ns")), ("host", pa.string()), ("gpu_uuid", pa.string())]
        + [(c, pa.float64()) for c in columns[3:6]]
        + [("date", pa.date32())]
    )
    theirs = found.to_table(columns=columns).cast(plain)
    with Store(fleet.url) as store:
        ours = store.query(f"SELECT {', '.join(columns)} FROM gpu")
    keys = [(c, "ascending") for c in ("host", "gpu_uuid", "ts")]
    theirs = theirs.sort_by(keys).to_pylist()
    ours = ours.sort_by(keys).to_pylist()
    assert len(ours) >= HOSTS * GPUS_PER_HOST * SECONDS
    assert theirs == ours


def test_a_writer_killed_mid_upload_leaves_nothing_visible(s3: S3) -> None:
    bucket = s3.bucket()
    url = f"s3://{bucket}/store"
    with SegmentWriter(url, "steady", clock=FakeClock(0)) as w:
        w.append_table(
            Kind.GPU,
            pa.table({"ts": [10**18 + i for i in range(100)], "gpu_uuid": ["GPU-0"] * 100,
                      "power_watts": [100.0] * 100}),
        )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "upload", url, "600000"],
        env=s3.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120
        while not s3.client.list_multipart_uploads(Bucket=bucket).get("Uploads"):
            assert proc.poll() is None, "the upload finished before it could be interrupted"
            assert time.monotonic() < deadline, "no multipart upload ever started"
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    in_flight = s3.client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert any("killed_writer" in u["Key"] for u in in_flight)  # killed mid-upload indeed
    assert not [k for k in s3.keys(bucket) if "killed_writer" in k]
    with Store(url) as store:
        assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 100
        assert all("killed_writer" not in str(f) for f in store.files(Kind.GPU))


def test_a_commit_is_invisible_until_its_record_is_uploaded(s3: S3) -> None:
    url = f"s3://{s3.bucket()}/store"
    table = pa.table({"ts": [10**18, 10**18 + 1], "gpu_uuid": ["GPU-a", "GPU-b"],
                      "power_watts": [1.0, 2.0]})  # fmt: skip
    with Commit(url) as commit:
        writer = SegmentWriter(url, "importer", commit=commit)
        writer.append_table(Kind.GPU, table)
        writer.close()
        with Store(url) as store:
            assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 0
        commit.commit()
    with Store(url) as store:
        assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 2

    dead = Commit(url)  # a writer that dies: never commits, never aborts
    writer = SegmentWriter(url, "dead", commit=dead)
    writer.append_table(Kind.GPU, table)
    writer.close()
    assert clean_commits(url).files_deleted == 0  # its lock is fresh: it may still commit
    assert clean_commits(url, stale_seconds=0).files_deleted == 1
    with Store(url) as store:
        assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 2


def test_retention_deletes_old_days_in_the_bucket(s3: S3) -> None:
    bucket = s3.bucket()
    url = f"s3://{bucket}/store"
    now = 1_765_000_000 * 10**9
    with SegmentWriter(url, "n1", clock=FakeClock(now)) as w:
        days = [now - d * NS_PER_DAY for d in (0, 1, 5, 9)]
        w.append_table(Kind.GPU, pa.table({"ts": days, "gpu_uuid": ["GPU-0"] * 4,
                                           "power_watts": [1.0] * 4}))  # fmt: skip
    removed = apply_retention(url, keep_days=3, clock=FakeClock(now))
    assert sorted(str(p).rsplit("=", 1)[-1] for p in removed) == sorted(
        day_of(now - d * NS_PER_DAY) for d in (5, 9)
    )
    assert not [k for k in s3.keys(bucket) if day_of(now - 5 * NS_PER_DAY) in k]
    with Store(url) as store:
        assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 2


def test_record_query_and_errors_on_the_command_line(s3: S3) -> None:
    url = f"s3://{s3.bucket()}/cli"
    env = {**s3.env, "GPULENS_COLLECT_COLLECTORS": "simulated", "GPULENS_HOST": "rec"}
    rec = subprocess.run(
        [sys.executable, "-m", "gpulens", "record", "--data-dir", url, "--duration", "3"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr[-3000:]
    q = subprocess.run(
        [sys.executable, "-m", "gpulens", "query", "--data-dir", url, "--format", "json",
         "SELECT count(DISTINCT gpu_uuid) AS gpus FROM gpu"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert q.returncode == 0, q.stderr[-3000:]
    assert '"gpus": 12' in q.stdout.replace(" ", "").replace('"gpus":', '"gpus": ')

    missing = subprocess.run(
        [sys.executable, "-m", "gpulens", "record", "--data-dir", "s3://no-such-bucket-x/p",
         "--duration", "1"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode != 0
    assert "s3://no-such-bucket-x/p" in missing.stderr and "bucket" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_ingest_and_fleet_take_the_url(s3: S3, shared: Path) -> None:
    url = f"s3://{s3.bucket()}/ingested"
    capture = shared / f"{XML}/a100-sxm4-v12.xml"  # <timestamp>Fri Aug  4 11:44:30 2023
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "ingest", str(capture), "--data-dir", url],
        env=s3.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with Store(url) as store:
        got = store.query("SELECT count(*) AS n, min(ts) AS t FROM gpu").to_pylist()[0]
    assert got["n"] >= 1
    assert got["t"].isoformat().startswith("2023-08-04T11:44:30")  # the capture's timestamp
    fleet = subprocess.run(
        [sys.executable, "-m", "gpulens", "fleet", "--data-dir", url, "--format", "json"],
        env=s3.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert fleet.returncode == 0, fleet.stderr[-3000:]
    doc = json.loads(fleet.stdout)
    assert doc["sources"] == [f"store: {url}"]
    assert doc["usage"]["window"]["start"] == "2023-08-04T11:44:00Z"
    assert sum(q["gpus"] for q in doc["usage"]["by_queue"]) == 1  # one GPU in the capture


def test_the_agent_records_into_the_bucket_and_its_dashboard_reads_it(s3: S3) -> None:
    httpx = pytest.importorskip("httpx")
    from faults import free_port, wait_healthy

    url = f"s3://{s3.bucket()}/agent"
    listen = f"127.0.0.1:{free_port()}"
    env = {**s3.env, "GPULENS_COLLECT_COLLECTORS": "simulated", "GPULENS_HOST": "agent-1",
           "GPULENS_STORE_FLUSH_SECONDS": "1"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--data-dir", url, "--listen", listen],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_healthy(proc, f"http://{listen}")
        deadline = time.monotonic() + 90
        gpus: list[Any] = []
        while len(gpus) < 12:
            assert time.monotonic() < deadline, f"the dashboard listed {len(gpus)} GPUs"
            time.sleep(1)
            gpus = httpx.get(f"http://{listen}/api/gpus", timeout=30).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert [k for k in s3.keys(url.split("/")[2]) if "/gpu/date=" in k]


def test_an_agents_maintenance_compacts_its_recent_days_only(s3: S3) -> None:
    """Each partition an agent looks at costs requests, so on a bucket it compacts today's and
    yesterday's; another host's files are left to that host."""
    bucket = s3.bucket()
    url = f"s3://{bucket}/store"
    now = 1_765_000_000 * 10**9
    for host in ("n1", "n2"):
        for _ in range(2):
            with SegmentWriter(url, host, clock=FakeClock(now)) as w:
                days = [now - 3600 * 10**9 - d * NS_PER_DAY for d in (0, 1, 5)]
                w.append_table(Kind.GPU, pa.table({"ts": days, "gpu_uuid": [f"GPU-{host}"] * 3,
                                                   "power_watts": [1.0] * 3}))  # fmt: skip
    done = maintain(url, keep_days=30, compact_min_age_seconds=60, clock=FakeClock(now), host="n1")
    assert done.compaction.files_merged == 4  # n1's two segments of today and of yesterday
    with Store(url) as store:
        live = [f.name.split("-")[0] + "-" + f.name.split("-")[1] for f in store.files(Kind.GPU)]
        assert store.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 12
    assert sorted(live) == sorted(["cmp-n1"] * 2 + ["seg-n1"] * 2 + ["seg-n2"] * 6)


def test_the_compaction_child_opens_a_bucket_with_the_configured_credentials(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent given its bucket's credentials in its configuration (`store.aws_*`, not the
    environment) hands its large merges to a child process: it opens the same bucket with the
    same credentials (without them it would look for the bucket in AWS itself)."""
    from gpulens.app.store_child import compact_in_child
    from gpulens.store.location import open_location

    bucket = s3.bucket()
    url = f"s3://{bucket}/store"
    options = {"aws_endpoint_url": s3.endpoint, "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing", "aws_region": "us-east-1"}  # fmt: skip
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)  # the children inherit no credentials
    store = open_location(url, options)
    now = 1_765_000_000 * 10**9
    for _ in range(2):
        with SegmentWriter(store, "n1", clock=FakeClock(now)) as w:
            days = [now - 3600 * 10**9 - d * NS_PER_DAY for d in (0, 1)]
            w.append_table(Kind.GPU, pa.table({"ts": days, "gpu_uuid": ["GPU-0"] * 2,
                                               "power_watts": [1.0, 2.0]}))  # fmt: skip
    clock = FakeClock(now)
    done = compact_in_child(store, clock, host="n1", min_age_seconds=60, options=options)
    assert (done.files_merged, done.partitions_compacted) == (4, 2)
    with Store(store) as reader:
        assert reader.query("SELECT count(*) AS n FROM gpu")["n"][0].as_py() == 4
