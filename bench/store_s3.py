"""The fleet report with the store in a bucket of a local S3 server, against on local disk.

    .venv/bin/python bench/store_s3.py --dir STORE [--runs 3]     # 64 GPUs x 7 days
    .venv/bin/python bench/store_s3.py --quick                     # 16 GPUs x 1 day

STORE is built (when missing) by bench_frames.py's builder: 7 days x 64 GPUs at 1 s (38.7M gpu
rows plus process rows), written in hourly segments and compacted into daily files, with the
frames cache of the closed days. Its data files are uploaded to a bucket of moto's S3 server,
run in a child process on loopback behind a WSGI wrapper that counts, on the server's side,
every request, every ranged GET and every body byte sent.

Each run times `analyse` (the report) three ways, interleaved: the local store as it is (frames
cache used), the same local files without the frames cache (raw rows: what an object store
reads, since the cache is kept on local disk only), and the bucket. Then one query, the hourly
rollup of five GPU metrics, on the bucket, counts what it fetched against the size of the files
it read: the bytes column pruning saves. Medians of `--runs` runs. Not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpulens.app.analysis import analyse
from gpulens.model import Kind
from gpulens.store import Store

COUNTS_PATH = "/__counts"
ROLLUP = """
SELECT gpu_uuid, date_trunc('hour', ts) AS hour, avg(sm_active_ratio), avg(tensor_active_ratio),
       avg(dram_active_ratio), avg(power_watts), max(temperature_celsius)
FROM gpu GROUP BY ALL
"""


# -- the counting S3 server (child process) ---------------------------------------------------


def _serve(port_queue: Any) -> None:
    """moto's S3 server behind a wrapper that counts requests and bytes sent."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    moto = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()
    counts = dict.fromkeys(
        ("requests", "gets", "ranged_gets", "lists", "heads", "puts", "posts", "deletes",
         "bytes_sent"), 0
    )  # fmt: skip

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == COUNTS_PATH:
            with lock:
                body = json.dumps(counts).encode()
                if "reset" in environ.get("QUERY_STRING", ""):
                    counts.update(dict.fromkeys(counts, 0))
            start("200 OK", [("Content-Type", "application/json")])
            return [body]
        method = environ.get("REQUEST_METHOD")
        listing = method == "GET" and "list-type" in environ.get("QUERY_STRING", "")
        with lock:
            counts["requests"] += 1
            counts["lists"] += listing
            counts["gets"] += method == "GET" and not listing
            counts["ranged_gets"] += method == "GET" and "HTTP_RANGE" in environ
            counts["heads"] += method == "HEAD"
            counts["puts"] += method == "PUT"
            counts["posts"] += method == "POST"
            counts["deletes"] += method == "DELETE"

        def counted(chunks: Iterable[bytes]) -> Iterator[bytes]:
            for chunk in chunks:
                with lock:
                    counts["bytes_sent"] += len(chunk)
                yield chunk

        return counted(moto(environ, start))

    server = make_server("127.0.0.1", 0, app, threaded=True)
    port_queue.put(server.server_address[1])
    server.serve_forever()


def counts(endpoint: str, reset: bool = False) -> dict[str, int]:
    with urllib.request.urlopen(endpoint + COUNTS_PATH + ("?reset=1" if reset else "")) as r:
        return dict(json.loads(r.read()))


# -- the stores --------------------------------------------------------------------------------


def build_store(root: Path, gpus: int, days: int) -> None:
    from bench_frames import build

    t0 = time.perf_counter()
    rows = build(root, gpus, days)
    print(f"built {rows['gpu'] / 1e6:.1f}M gpu rows in {time.perf_counter() - t0:.0f} s")


def raw_copy(root: Path, dest: Path) -> None:
    """The store's data files without the frames cache (hard links: no bytes copied)."""
    for kind in Kind:
        src = root / kind.value
        if src.is_dir():
            shutil.copytree(src, dest / kind.value, copy_function=os.link,
                            ignore=shutil.ignore_patterns(".*"))  # fmt: skip


def upload(root: Path, fs: pafs.FileSystem, bucket: str) -> tuple[int, int]:
    """Copy the data files of every kind into the bucket; returns (files, bytes)."""
    files = size = 0
    for kind in Kind:
        for path in sorted((root / kind.value).glob("date=*/*.parquet")):
            key = f"{bucket}/store/{path.relative_to(root)}"
            with path.open("rb") as src, fs.open_output_stream(key) as out:
                out.write(src.read())
            files += 1
            size += path.stat().st_size
    return files, size


def bucket_bytes(fs: pafs.FileSystem, prefix: str) -> int:
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True))
    return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)


def timed_report(where: str | Path) -> tuple[float, int]:
    with Store(where) as store:
        t0 = time.perf_counter()
        view = analyse(store)
        return time.perf_counter() - t0, int(view.totals.get("gpus") or 0)


def agent_requests(endpoint: str, url: str, minutes: int, flush_s: float) -> dict[str, Any]:
    """What one 8-GPU node's recording costs in requests: the real pipeline (simulated NVML
    binding, scheduler, writer) for `minutes` simulated minutes, flushing every `flush_s`, then
    one maintenance pass as the agent runs it; counted on the server."""
    import math

    from gpulens.app import session
    from gpulens.clock import FakeClock, PacedClock
    from gpulens.config import load_config
    from gpulens.pipeline.rates import RateStage
    from gpulens.pipeline.scheduler import Scheduler
    from gpulens.store import SegmentWriter, maintain

    cfg = load_config(overrides={"data_dir": url, "simulated.hosts": 1,
                                 "simulated.gpus_per_host": 8})  # fmt: skip
    start = 1_764_547_200 * 10**9  # 2025-12-01 00:00 UTC
    clock = PacedClock(start_ns=start, speed=math.inf)
    fleet = session.simulated_fleet(cfg, start)
    collectors = session.fleet_collectors(fleet, clock)
    writer = SegmentWriter(cfg.data_dir, fleet.hosts[0], flush_seconds=flush_s, clock=clock)
    scheduler = Scheduler(collectors, writer, clock, interval_s=1.0, rates=RateStage())
    counts(endpoint, reset=True)
    try:
        scheduler.run(duration_s=minutes * 60.0)
    finally:
        writer.close()
        for c in collectors:
            c.close()
        scheduler.close()
    record = counts(endpoint, reset=True)
    end = start + minutes * 60 * 10**9
    for later in (0, 120):  # the pass that merges, then the one that deletes the inputs
        maintain(cfg.data_dir, keep_days=30, compact_min_age_seconds=60.0,
                 clock=FakeClock(end + later * 10**9), host=fleet.hosts[0])  # fmt: skip
    return {
        "record": record,
        "maintain": counts(endpoint, reset=True),
        "flushes": max(1, int(minutes * 60 / flush_s)),
        "stored": bucket_bytes(cfg.data_dir.fs, cfg.data_dir.key),
    }  # type: ignore[union-attr]


# -- main --------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="the store (built when missing)")
    ap.add_argument("--quick", action="store_true", help="16 GPUs x 1 day instead of 64 x 7")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    gpus, days = (16, 1) if args.quick else (64, 7)
    root = args.dir or Path(tempfile.mkdtemp(prefix="gpulens-s3bench-"))
    if not (root / "gpu").is_dir():
        build_store(root, gpus, days)
    work = Path(tempfile.mkdtemp(prefix="gpulens-s3bench-raw-"))
    queue: Any = mp.get_context("spawn").Queue()
    server = mp.get_context("spawn").Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{queue.get(timeout=120)}"
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
                          AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1")  # fmt: skip
        fs = pafs.S3FileSystem(endpoint_override=endpoint.removeprefix("http://"),
                               scheme="http", access_key="bench", secret_key="bench",
                               region="us-east-1", allow_bucket_creation=True,
                               request_timeout=30)  # fmt: skip
        fs.create_dir("bench")
        raw = work / "raw"
        raw_copy(root, raw)
        t0 = time.perf_counter()
        files, size = upload(root, fs, "bench")
        t_upload = time.perf_counter() - t0
        url = "s3://bench/store"
        load0 = os.getloadavg()[0]
        cached: list[float] = []
        local: list[float] = []
        remote: list[float] = []
        sent: list[dict[str, int]] = []
        gpus_seen = set()
        for _ in range(args.runs):
            t, g = timed_report(root)
            cached.append(t)
            gpus_seen.add(g)
            t, g = timed_report(raw)
            local.append(t)
            gpus_seen.add(g)
            counts(endpoint, reset=True)
            t, g = timed_report(url)
            sent.append(counts(endpoint, reset=True))
            remote.append(t)
            gpus_seen.add(g)
        rollup_local: list[float] = []
        rollup_remote: list[float] = []
        rollup_sent: list[dict[str, int]] = []
        for _ in range(args.runs):
            with Store(raw) as store:
                t0 = time.perf_counter()
                store.query(ROLLUP)
                rollup_local.append(time.perf_counter() - t0)
            with Store(url) as store:
                store.files(Kind.GPU)  # listing outside the count: the scan is what is measured
                counts(endpoint, reset=True)
                t0 = time.perf_counter()
                store.query(ROLLUP)
                rollup_remote.append(time.perf_counter() - t0)
                rollup_sent.append(counts(endpoint, reset=True))
        load1 = os.getloadavg()[0]
        gpu_bytes = bucket_bytes(fs, "bench/store/gpu")
        all_bytes = bucket_bytes(fs, "bench/store")
        node = agent_requests(endpoint, "s3://bench/node", 30, 60.0)
    finally:
        server.terminate()
        shutil.rmtree(work, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    def med_count(rows: list[dict[str, int]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    mb = 1e6
    rep_bytes = med_count(sent, "bytes_sent")
    rollup_bytes = med_count(rollup_sent, "bytes_sent")
    print(f"store: {gpus} GPUs x {days} days, {files} data files, {size / mb:.0f} MB "
          f"uploaded in {t_upload:.0f} s; GPUs in the report: {sorted(gpus_seen)}; "
          f"load average {load0:.1f} before, {load1:.1f} after (2 cores)")  # fmt: skip
    print("\n| measure | value |\n|---|---|")
    print(f"| report, local disk, frames cache, median of {args.runs} | {med(cached):.2f} s |")
    print(f"| report, local disk, raw rows, median of {args.runs} | {med(local):.2f} s |")
    print(f"| report, S3 (moto on loopback), raw rows, median of {args.runs} | "
          f"{med(remote):.2f} s |")  # fmt: skip
    print(f"| ratio S3 / local disk (raw rows both) | {med(remote) / med(local):.2f}x |")
    print(f"| ratio S3 / local disk with its frames cache | {med(remote) / med(cached):.2f}x |")
    print(f"| report on S3: requests (ranged GETs) | {med_count(sent, 'requests'):.0f} "
          f"({med_count(sent, 'ranged_gets'):.0f}) |")  # fmt: skip
    print(f"| report on S3: bytes fetched / bytes stored (all kinds) | {rep_bytes / mb:.0f} MB "
          f"/ {all_bytes / mb:.0f} MB ({rep_bytes / all_bytes:.0%}) |")  # fmt: skip
    print(f"| hourly rollup, 5 metrics, local raw / S3, median | {med(rollup_local):.2f} s / "
          f"{med(rollup_remote):.2f} s |")  # fmt: skip
    print(f"| hourly rollup on S3: requests (ranged GETs) | "
          f"{med_count(rollup_sent, 'requests'):.0f} "
          f"({med_count(rollup_sent, 'ranged_gets'):.0f}) |")  # fmt: skip
    print(f"| hourly rollup on S3: bytes fetched / gpu bytes stored | {rollup_bytes / mb:.0f} MB "
          f"/ {gpu_bytes / mb:.0f} MB ({rollup_bytes / gpu_bytes:.0%}); column pruning saves "
          f"{(gpu_bytes - rollup_bytes) / mb:.0f} MB |")  # fmt: skip
    rec, mnt, flushes = node["record"], node["maintain"], node["flushes"]
    print(f"| one 8-GPU node, 30 simulated min, flush every 60 s: uploads (PUT + POST) per "
          f"flush | {(rec['puts'] + rec['posts']) / flushes:.1f} |")  # fmt: skip
    print(f"| same: two maintenance passes (one merges today's segments, the next deletes "
          f"them), requests: LIST / "
          f"GET+HEAD / PUT+POST / DELETE | {mnt['lists']} / {mnt['gets'] + mnt['heads']} / "
          f"{mnt['puts'] + mnt['posts']} / {mnt['deletes']} |")  # fmt: skip
    segs = rec["puts"] + rec["posts"]  # one upload per segment (small ones: one PUT each)
    print(f"| same, per merged segment: PUT-class requests of the passes (compacted files, "
          f"empty 'directory' markers pyarrow re-creates after each delete) / GET+HEAD | "
          f"{(mnt['puts'] + mnt['posts']) / segs:.2f} / "
          f"{(mnt['gets'] + mnt['heads']) / segs:.1f} |")  # fmt: skip
    print(f"| same: bytes stored after the passes | {node['stored'] / mb:.2f} MB |")


if __name__ == "__main__":
    main()
