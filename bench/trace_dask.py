"""Benchmark `gpulens trace` over many ranks: in one process, on a local process pool, and on
a Dask cluster of 1, 2 and 4 workers.

    .venv/bin/python bench/trace_dask.py [--ranks 256] [--small 64] [--workers 1,2,4]
                                         [--runs 3] [--dir DIR] [--keep]
    .venv/bin/python bench/trace_dask.py --big FILE

The job: `--ranks` rank files tiled from the real multi-rank traces in ../shared/data/traces
(every stored trace that is one rank of a job of several: 8 files from 6 jobs, 0.1-3 MB of
gzip, 4.7k-216k events each), rank i a copy of source i mod 8 whose `distributedInfo` says
rank i of `--ranks`. A copy is two gzip members: its own header (metadata, the new rank), then
the source's events, compressed once per source. Written into a temporary directory outside
the repository, deleted afterwards unless `--keep` (`--dir` reuses one).

Each measurement is a fresh client process (`--client`) that runs the job's analysis and its
JSON report (`analyze_files` → `build_view` → `to_json`) with one executor, and reports its
wall time, its RSS before the job (interpreter, imports, the scheduler connection) and its
peak RSS (VmHWM): the client's growth per rank is (peak − before) / ranks, at `--small`
and `--ranks` ranks. The Dask clusters are `distributed.LocalCluster`s with 1-thread worker
processes on loopback; each worker's peak RSS is read after the runs, against the in-process
peak of the largest single rank (a fresh process analysing that rank alone). The JSON of every
executor's run is compared with the in-process one (same bytes).

`--big FILE` measures one large rank alone (e.g. the ~1 GB file `trace_big.py --gb 1 --dir D
--keep` leaves): its in-process peak RSS against the worker's peak on a fresh 1-worker cluster,
which is what a worker needs per rank once Dask's own footprint is small beside the trace.

This machine has 2 cores: runs with more workers than cores are measured (oversubscribed), and
wall times on W workers with a core each are projected from the 1-worker run: the client's
serial part (its wall time after the last rank came back) plus the workers' CPU seconds ÷ W.
CPU seconds (user + system) are counted for the client and, on Dask, for the workers.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
TRACES = SHARED / "data/traces"
_ROW = re.compile(r"^\| *([^|]+?) *\| *([^|]+?\.json\.gz) *\|(?:[^|]*\|){3} *(\S+) */ *(\S+) *\|")
MIB = 1024 * 1024


def sources() -> list[Path]:
    """The stored traces that are one rank of a job of several (MANIFEST: world size > 1)."""
    out = []
    for line in (TRACES / "MANIFEST.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m and m.group(4).isdigit() and int(m.group(4)) > 1:
            out.append(TRACES / m.group(1) / m.group(2))
    return out


def _split(raw: bytes) -> tuple[str, dict[str, Any], bytes]:
    """The text before `"distributedInfo"`'s value, the value, and the rest (from its end)."""
    key = raw.index(b'"distributedInfo"')
    head = raw[:key].decode()
    text = raw[key : raw.index(b'"traceEvents"')].decode()
    start = text.index("{")
    info, end = json.JSONDecoder().raw_decode(text, start)
    return head + text[:start], info, raw[key + len(text[:end].encode()) :]


def tile(ranks: int, folder: Path) -> list[Path]:
    """`ranks` rank files in `folder` (module docstring)."""
    files = []
    parts = []
    for src in sources():
        head, info, rest = _split(gzip.decompress(src.read_bytes()))
        parts.append((head, info, zlib.compress(rest, 6, wbits=31)))
    for i in range(ranks):
        head, info, body = parts[i % len(parts)]
        mine = {**info, "rank": i, "world_size": ranks}
        path = folder / f"rank_{i:04d}.json.gz"
        path.write_bytes(gzip.compress((head + json.dumps(mine)).encode(), 6) + body)
        files.append(path)
    return files


CLIENT_CODE = """
import json, os, sys, time
from gpulens.app.trace_executors import executor
from gpulens.app.trace_rank import RankTask
from gpulens.app.traces import combine, trace_limits
from gpulens.present.reports.trace import build_view, to_json
import gpulens.analyze.traces.ranks, gpulens.findings.traces  # the client's imports, up front
spec, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
chosen = executor(spec, len(files))
limits = trace_limits()
if spec.startswith("dask://"):
    import distributed  # the client library, imported before the baseline as run() would
several = len(files) > 1
tasks = [RankTask(i, os.path.abspath(f), f, limits, False, several) for i, f in enumerate(files)]
def status(key):  # this process's memory (kB in /proc/self/status), MiB; VmHWM: its peak RSS
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":")) / 1024
before = status("VmRSS")
start, cpu = time.perf_counter(), time.process_time()
outcomes = chosen.run(tasks)
ranked = time.perf_counter()
job = combine(outcomes)
del outcomes
analysed = time.perf_counter()
text = to_json(build_view(job))
done, cpu = time.perf_counter(), time.process_time() - cpu
with open(out, "w") as f:
    f.write(text)
print(json.dumps({
    "wall_s": done - start, "ranks_s": ranked - start, "serial_s": done - ranked, "cpu_s": cpu,
    "before_mib": before, "peak_mib": status("VmHWM"),
    "ranks": len(job.analyses), "failed": len(job.failures),
}))
"""

ALONE_CODE = """
import json, sys
from gpulens.app.trace_executors import LocalExecutor
from gpulens.app.traces import analyze_files
from gpulens.present.reports.trace import build_view, to_json
to_json(build_view(analyze_files(sys.argv[1:], executor=LocalExecutor())))
with open("/proc/self/status") as f:
    peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
print(json.dumps({"peak_mib": peak}))
"""


def _python(code: str, *args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    if run.returncode:
        raise SystemExit(f"child failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def client(spec: str, files: list[Path], out: Path) -> dict[str, Any]:
    """One fresh client process running the job with `spec`; its figures."""
    got = _python(CLIENT_CODE, spec, str(out), *map(str, files))
    got["digest"] = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
    return got


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def _worker_cpu(cluster: Any) -> float:
    """CPU seconds (user + system) the cluster's worker processes have used so far."""
    import distributed

    def used() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    with distributed.Client(cluster, set_as_default=False) as c:
        return float(sum(c.run(used).values()))


def measure(
    spec: str, files: list[Path], runs: int, out: Path, cluster: Any = None
) -> dict[str, Any]:
    rows = []
    for _ in range(runs):
        before = _worker_cpu(cluster) if cluster is not None else 0.0
        rows.append(client(spec, files, out))
        rows[-1]["worker_cpu_s"] = _worker_cpu(cluster) - before if cluster is not None else 0.0
        print(
            f"  {spec} {len(files)} ranks: {rows[-1]['wall_s']:.2f} s (load {_load()})",
            file=sys.stderr,
        )
    digests = {r["digest"] for r in rows}
    return {
        "wall_s": _median(rows, "wall_s"),
        "walls": [round(r["wall_s"], 2) for r in rows],
        "serial_s": _median(rows, "serial_s"),
        "cpu_s": _median(rows, "cpu_s"),
        "worker_cpu_s": _median(rows, "worker_cpu_s"),
        "before_mib": _median(rows, "before_mib"),
        "peak_mib": _median(rows, "peak_mib"),
        "digest": digests.pop() if len(digests) == 1 else "differs between runs",
        "ranks": rows[0]["ranks"],
        "failed": rows[0]["failed"],
    }


def peak_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited across fork and exec)."""
    with Path("/proc/self/status").open() as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _worker_peaks(cluster: Any) -> list[float]:
    import distributed

    def peak() -> float:
        return peak_mib()

    with distributed.Client(cluster, set_as_default=False) as c:
        return sorted(c.run(peak).values())


def _cluster(workers: int) -> Any:
    import distributed

    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=":0",
        silence_logs=40,
    )


def big_rank(path: Path) -> None:
    """One large rank: in-process peak RSS against the worker's peak on a fresh cluster."""
    alone = [_python(ALONE_CODE, str(path))["peak_mib"] for _ in range(2)]
    with _cluster(1) as cluster:
        idle = _worker_peaks(cluster)[0]
        spec = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        got = client(spec, [path], path.with_suffix(".report.json"))
        worker = _worker_peaks(cluster)[0]
    print(f"\n{path.name}: {path.stat().st_size / MIB:,.0f} MiB; load {_load()}\n")
    print("| | peak RSS MiB |\n|---|---|")
    print(f"| in process, alone (2 runs) | {', '.join(f'{a:.0f}' for a in alone)} |")
    print(f"| Dask worker before the job (its own imports and state) | {idle:.0f} |")
    print(f"| Dask worker after the job | {worker:.0f} ({worker / min(alone):.2f}× in process) |")
    print(f"| client (wall {got['wall_s']:.1f} s) | {got['peak_mib']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--small", type=int, default=64, help="the smaller job, for growth per rank")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="reuse (or build into) this directory")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-processes", action="store_true", help="skip the processes:2 runs")
    ap.add_argument(
        "--big",
        type=Path,
        help="only this: one large rank file (e.g. from trace_big.py --keep), its in-process "
        "peak RSS against a 1-worker Dask cluster's worker peak on it",
    )
    args = ap.parse_args()

    if args.big is not None:
        big_rank(args.big)
        return

    workers = [int(w) for w in args.workers.split(",")]
    folder = args.dir or Path(tempfile.mkdtemp(prefix="gpulens-trace-dask-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        files = sorted(folder.glob("rank_*.json.gz"))
        if len(files) != args.ranks:
            for f in files:
                f.unlink()
            files = tile(args.ranks, folder)
        size = sum(f.stat().st_size for f in files)
        print(
            f"{len(files)} ranks tiled from {len(sources())} real rank files: "
            f"{size / MIB:,.0f} MiB of gzip in {time.perf_counter() - t0:.1f} s; "
            f"{os.cpu_count()} cores, load {_load()}",
            file=sys.stderr,
        )
        out = folder / "report.json"
        small = files[: args.small]
        largest = max(sources()[: len(files)], key=lambda p: p.stat().st_size)
        alone_peak = _python(ALONE_CODE, str(largest))["peak_mib"]
        results: dict[str, dict[str, Any]] = {}
        results["local"] = measure("local", files, args.runs, out)
        results["local small"] = measure("local", small, 1, out)
        if not args.no_processes:
            results["processes:2"] = measure("processes:2", files, args.runs, out)
        peaks: dict[int, list[float]] = {}
        for w in workers:
            with _cluster(w) as cluster:
                spec = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
                results[f"dask {w}"] = measure(spec, files, args.runs, out, cluster)
                if w == workers[0]:
                    results[f"dask {w} small"] = measure(spec, small, 1, out, cluster)
                peaks[w] = _worker_peaks(cluster)
        report(args, files, size, results, peaks, alone_peak, largest)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def report(
    args: argparse.Namespace,
    files: list[Path],
    size: int,
    results: dict[str, dict[str, Any]],
    peaks: dict[int, list[float]],
    alone_peak: float,
    largest: Path,
) -> None:
    n, m = len(files), args.small
    local = results["local"]
    print(
        f"\n{n} ranks ({size / MIB:,.0f} MiB gzip), {os.cpu_count()} cores, load {_load()}; "
        f"medians of {args.runs} runs\n"
    )
    print(
        "| executor | wall s (runs) | CPU s: client + workers | client RSS before MiB | "
        "client peak MiB | client growth per rank KiB | JSON same as in-process |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if name.endswith("small"):
            continue
        growth = (r["peak_mib"] - r["before_mib"]) * 1024 / r["ranks"]
        same = "yes" if r["digest"] == local["digest"] else "NO"
        workers = f"{r['worker_cpu_s']:.1f}" if name.startswith("dask") else "-"
        print(
            f"| {name} | {r['wall_s']:.2f} ({', '.join(map(str, r['walls']))}) | "
            f"{r['cpu_s']:.1f} + {workers} | {r['before_mib']:.0f} | {r['peak_mib']:.0f} | "
            f"{growth:.0f} | {same} |"
        )
    print(
        "\nClient growth per rank between the two job sizes (peak at "
        f"{n} ranks − peak at {m}) / {n - m}:"
    )
    for name in ("local", f"dask {args.workers.split(',')[0]}"):
        big, little = results[name], results[f"{name} small"]
        slope = (big["peak_mib"] - little["peak_mib"]) * 1024 / (n - m)
        print(
            f"- {name}: {little['peak_mib']:.0f} MiB at {m} ranks, {big['peak_mib']:.0f} MiB "
            f"at {n}: **{slope:.0f} KiB per rank**"
        )
    print(f"\nLargest rank ({largest.name}) alone, in process: peak {alone_peak:.0f} MiB.")
    for w, p in peaks.items():
        print(
            f"- dask {w} worker(s): worker peaks {', '.join(f'{x:.0f}' for x in p)} MiB "
            f"(max {max(p) / alone_peak:.2f}× the largest rank in process)"
        )
    one = results[f"dask {args.workers.split(',')[0]}"]
    serial, per_rank = one["serial_s"], one["worker_cpu_s"]
    print(
        "\nProjected wall time on W workers with a core each, from the 1-worker run: the "
        f"client's serial part (cross-rank analysis and JSON, {serial:.2f} s wall) + the "
        f"workers' CPU ({per_rank:.1f} s, {per_rank / n:.3f} s a rank) ÷ W:"
    )
    for w in (1, 2, 4, 8, 16, 32, 64):
        print(f"- {w}: {serial + per_rank / w:.1f} s")


if __name__ == "__main__":
    main()
