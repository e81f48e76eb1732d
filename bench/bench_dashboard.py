"""The dashboard's page data: each page's view model built from the store, cold.

    python bench/bench_dashboard.py --dir STORE [--runs 5] [--range 7d]

STORE is a store built by `bench_frames.py --days 7 --gpus 64 --interval 1 --dir STORE
--build-only` (with the frames cache of closed days its maintenance writes). Every run uses a
fresh `Dashboard` (no analysis shared between pages or runs) over one open store, as the agent
serves it; a page's time is the median over the runs of resolving the window and building its
view model (`gpulens.present.dashboard`), then of the same request through the API (FastAPI
validation and JSON included, a fresh app per run). The GPU page is the first GPU's.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulens.app.agent import AgentContext
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.web.app import create_app

with warnings.catch_warnings():  # starlette asks for httpx2, which is not a dependency here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def _pages(dash: Dashboard, range_name: str, gpu: str) -> dict[str, Callable[[], Any]]:
    def window() -> Any:
        return dash.window(range_name)

    return {
        "fleet": lambda: dash.fleet(window()),
        "gpu": lambda: dash.gpu(gpu, window()),
        "workloads": lambda: dash.workloads(window()),
        "jobs and users": lambda: dash.people(window()),
        "findings": lambda: dash.findings(window()),
        "now": dash.now,
    }


API = {
    "fleet": "/api/fleet",
    "gpu": "/api/gpus/{gpu}",
    "workloads": "/api/workloads",
    "jobs and users": "/api/people",
    "findings": "/api/findings",
    "now": "/api/now",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, required=True, help="the store to read")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--range", default="7d", choices=["1h", "6h", "24h", "7d"])
    args = ap.parse_args()
    ctx = AgentContext(data_dir=args.dir, live=None)
    gpu = Dashboard(ctx).gpus()[0].gpu_uuid
    names = list(API)
    cold: dict[str, list[float]] = {n: [] for n in names}
    api: dict[str, list[float]] = {n: [] for n in names}
    shared: list[float] = []
    facts: dict[str, Any] = {}
    for _ in range(args.runs):
        for name in names:
            dash = Dashboard(ctx)
            t0 = time.perf_counter()
            page = _pages(dash, args.range, gpu)[name]()
            cold[name].append(time.perf_counter() - t0)
            facts[name] = page
        dash = Dashboard(ctx)  # one dashboard: the pages after the first reuse its analysis
        t0 = time.perf_counter()
        for build in _pages(dash, args.range, gpu).values():
            build()
        shared.append(time.perf_counter() - t0)
        for name in names:
            client = TestClient(create_app(ctx))
            url = API[name].format(gpu=gpu) + ("" if name == "now" else f"?range={args.range}")
            t0 = time.perf_counter()
            response = client.get(url)
            api[name].append(time.perf_counter() - t0)
            response.raise_for_status()
    ctx.close()
    w = facts["fleet"].window
    gpus, found = len(facts["fleet"].heatmap.gpus), facts["findings"].total
    jobs = facts["jobs and users"].jobs_total
    print(f"window {args.range}: step {w.step_s} s, {gpus} GPUs, {found} findings, {jobs} jobs")
    print(f"\n| page | data, median of {args.runs} | API request, median of {args.runs} |")
    print("|---|---|---|")
    for name in names:
        print(f"| {name} | {statistics.median(cold[name]):.3f} s | "
              f"{statistics.median(api[name]):.3f} s |")  # fmt: skip
    print(f"| all six, sharing one analysis | {statistics.median(shared):.3f} s | |")


if __name__ == "__main__":
    main()
