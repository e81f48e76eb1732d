"""Benchmark one Prometheus `/metrics` scrape of the agent: 8 GPUs, ~50 processes.

    .venv/bin/python bench/bench_scrape.py [--scrapes 300] [--gpus 8] [--per-gpu 6] [--dcgm]

Target: "one /metrics scrape takes <= 10 ms of server time". A `LiveState` is fed two
minutes of ticks of a simulated node (`--gpus` H100s through the real NVML collector,
scheduler and rate stage, ten minutes in so the jobs run), with every GPU padded to
`--per-gpu` processes of distinct users and containers (so the per-label process sums cannot
collapse them), then classified (`refresh`), given a findings list and its collectors' health.
Timed, median of `--scrapes` (wall time, and this thread's CPU time, which leaves out waiting
for a core on a busy machine): `generate_latest` over the exporter registry (what the agent's
`/metrics` route does today: snapshot, families, text), `LiveCollector.exposition()` (the same
scrape without prometheus_client's per-sample encoding), its parts (`LiveState.snapshot`,
`LiveCollector.collect`), and both through FastAPI's `TestClient` and through a real uvicorn
server on localhost fetched with httpx (routing, response and sockets added). Prints a
markdown table. Not a test.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx
from prometheus_client import generate_latest

from gpulens.app import session
from gpulens.app.agent import AgentContext
from gpulens.app.live import LiveState
from gpulens.clock import FakeClock
from gpulens.collect.simulated import SimulatedFleet
from gpulens.findings.model import Finding, Severity
from gpulens.model import Kind, Reading
from gpulens.pipeline.rates import RateStage
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.pipeline.sinks import DiscardSink
from gpulens.present.prometheus import exporter

S = 1_000_000_000


def pad(tick: TickResult, per_gpu: int) -> TickResult:
    """The tick with every GPU's process list padded to `per_gpu` distinct processes."""
    extra: list[Reading] = []
    gpus = [r for r in tick.readings if r.kind is Kind.GPU]
    for gpu in gpus:
        base = {k: gpu.labels[k] for k in ("host", "gpu_uuid", "gpu_index", "gpu_model")}
        for k in range(per_gpu - 1):
            pid = 900_000 + 64 * int(base["gpu_index"]) + k
            labels = {
                **base,
                "pid": str(pid),
                "process_name": f"python worker_{k}.py",
                "user": f"user{pid % 11}",
                "container": f"c{pid:08x}",
                "job_id": f"job-{pid % 13}",
                "engine": "pytorch" if k % 3 else "tensorrt",
            }
            values = {
                "process_memory_used_bytes": float((1 + pid % 7) * 2**30),
                "process_sm_util_ratio": (5 + pid % 40) / 100,
                "process_mem_util_ratio": (pid % 20) / 100,
            }
            extra.append(Reading(Kind.PROCESS, tick.ts, labels, values))
    return replace(tick, readings=[*tick.readings, *extra])


def live_state(gpus: int, per_gpu: int) -> tuple[LiveState, int]:
    """A LiveState after two minutes of padded ticks, classified, with findings and health."""
    fleet = SimulatedFleet(hosts=1, gpus_per_host=gpus, seed=0)
    start = fleet.start_ns + 600 * S
    clock = FakeClock(start)
    sched = Scheduler(
        session.fleet_collectors(fleet, clock), DiscardSink(), clock, rates=RateStage()
    )
    live = LiveState(state_window_s=60, keep_s=300)
    live.watch(sched.stats)
    processes = 0
    for s in range(125):
        now = start + s * S
        clock.set(now)
        tick = pad(sched.tick(now), per_gpu)
        processes = sum(
            1 for r in tick.readings if r.kind is Kind.PROCESS and "gpu_uuid" in r.labels
        )
        live.on_tick(tick)
    live.refresh()
    findings = [
        Finding(
            rule_id=rule,
            severity=Severity.WARNING,
            subject={"host": "sim-node-0"},
            window=(start, start + 60 * S),
            summary=rule,
        )
        for rule in ("idle_allocated", "hollow_busy", "memory_bound")
    ]
    live.set_findings(findings, start + 120 * S)
    return live, processes


def median_ms(fn: Callable[[], object], n: int) -> tuple[float, float, float]:
    """(median wall, p90 wall, median CPU time of this thread) of `fn` in ms over `n` calls,
    after 10 warm-up calls. CPU time leaves out waiting for a core on a busy machine (and, for
    HTTP, the server thread's work)."""
    for _ in range(10):
        fn()
    walls, cpus = [], []
    for _ in range(n):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        fn()
        walls.append(time.perf_counter_ns() - t0)
        cpus.append(time.thread_time_ns() - c0)
    walls.sort()
    return (
        statistics.median(walls) / 1e6,
        walls[int(0.9 * (n - 1))] / 1e6,
        statistics.median(cpus) / 1e6,
    )


def families_of(collector: exporter.LiveCollector) -> Callable[[], object]:
    return lambda: list(collector.collect())


def fast_app(collector: exporter.LiveCollector) -> object:
    """An app serving /metrics from `LiveCollector.exposition` (what the agent's app could)."""
    from fastapi import FastAPI, Response
    from prometheus_client import CONTENT_TYPE_LATEST

    app = FastAPI()

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(collector.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(scrapes: int, gpus: int, per_gpu: int, dcgm: bool) -> None:
    from fastapi.testclient import TestClient

    from gpulens.present.web.app import create_app

    live, processes = live_state(gpus, per_gpu)
    options = exporter.ExporterOptions(dcgm_names=dcgm)
    registry = exporter.registry(live.snapshot, options=options)
    collector = exporter.LiveCollector(live.snapshot, options=options)
    body = generate_latest(registry)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    families = list(collector.collect())

    def current() -> bytes:
        return generate_latest(registry)

    rows: list[tuple[str, tuple[float, float, float]]] = [
        ("`LiveState.snapshot()`", median_ms(live.snapshot, scrapes)),
        (
            "`LiveCollector.collect()`: snapshot + families",
            median_ms(families_of(collector), scrapes),
        ),
        ("`generate_latest(registry)`: + text", median_ms(current, scrapes)),
        ("`LiveCollector.exposition()`: + text", median_ms(collector.exposition, scrapes)),
    ]
    with TemporaryDirectory() as tmp:
        ctx = AgentContext(
            data_dir=Path(tmp), live=live, exposition=lambda: generate_latest(registry)
        )
        app = create_app(ctx)
        fast = fast_app(collector)
        for label, served in (("`generate_latest`", app), ("`exposition()`", fast)):
            with TestClient(served) as client:
                assert client.get("/metrics").status_code == 200
                timing = median_ms(lambda c=client: c.get("/metrics"), scrapes)  # type: ignore[misc]
            rows.append((f"GET /metrics, FastAPI TestClient, {label}", timing))
            timing = _uvicorn(served, scrapes)
            rows.append((f"GET /metrics, uvicorn on localhost + httpx, {label}", timing))
        ctx.close()
    live.close()

    print(f"/metrics scrape, {gpus} GPUs, {processes} processes, {series} series in "
          f"{len(families)} families, {len(body) / 1024:.0f} KiB"
          f"{', with DCGM names' if dcgm else ''} (median of {scrapes})\n")  # fmt: skip
    print("| measure | median | p90 | CPU (median) |")
    print("|---|---|---|---|")
    for name, (med, p90, cpu) in rows:
        cpu_text = f"{cpu:.2f} ms" if name.startswith("`") else "client side"
        print(f"| {name} | {med:.2f} ms | {p90:.2f} ms | {cpu_text} |")


def _uvicorn(app: object, scrapes: int) -> tuple[float, float, float]:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            return median_ms(lambda: client.get("/metrics").raise_for_status(), scrapes)
    finally:
        server.should_exit = True
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=6, help="processes per GPU")
    parser.add_argument("--dcgm", action="store_true", help="also write DCGM names")
    args = parser.parse_args()
    run(args.scrapes, args.gpus, args.per_gpu, args.dcgm)


if __name__ == "__main__":
    main()
