"""Soak: the agent on a simulated fleet for a simulated day, under scrapes and dashboard viewers.

    python bench/soak.py [--gpus 64] [--hours 24] [--speed 400] [--interval 30] [--flush 60]

Starts `gpulens agent --speed SPEED` on `--gpus` simulated GPUs (8 per host) recording every
`--interval` simulated seconds and flushing every `--flush`, with retention of one day (the
partition of the day before is deleted after midnight) and compaction on the simulated clock.
Meanwhile one client scrapes `/metrics` every `--scrape-every` wall seconds and one viewer
requests `/api/now` and `/api/fleet` (`--view-range`, default the page's 6 h) every
`--view-every` wall seconds. Every
`--sample-every` wall seconds it records the agent's resident memory, open file descriptors,
the Parquet segments in the store, the simulated time reached (the last tick's) and the tick
lag: how far the ticks are behind the pace, in wall seconds. Prints the samples (thinned to
about 24 rows) and a verdict: RSS flat within 10 % (last sample against the first after
`--warmup-hours`), no fd growth, bounded segments.

`run_soak` is also what tests/integration/test_soak.py runs, shorter.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from agent_process import clean_env, free_port


@dataclass
class Sample:
    wall_s: float
    sim_h: float  # simulated hours since the start
    rss: int
    fds: int
    segments: int
    lag_s: float  # how far the ticks are behind the pace, in wall seconds
    missed: float


@dataclass
class Soak:
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    exit_code: int | None = None
    stderr: str = ""


def segments(data_dir: Path) -> int:
    """Parquet segments of the readings tables (not the frames cache)."""
    return sum(
        1
        for kind in ("gpu", "process", "host", "app", "event")
        for _ in (data_dir / kind).glob("date=*/*.parquet")
    )


def scrape(client: httpx.Client, url: str) -> dict[str, float]:
    """The missed ticks and the simulated time (the last tick's) from one /metrics scrape."""
    out = {}
    wanted = {
        "gpulens_ticks_missed_total": "gpulens_ticks_missed_total",
        "gpulens_last_tick_timestamp_seconds": "sim_now",
    }
    for line in client.get(url + "/metrics", timeout=30).text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


def load(url: str, paths: list[str], every_s: float, stop: threading.Event, soak: Soak) -> None:
    with httpx.Client() as client:
        while not stop.wait(every_s):
            for path in paths:
                try:
                    r = client.get(url + path, timeout=60)
                    soak.requests += 1
                    if r.status_code != 200:
                        soak.failures.append(f"{path}: HTTP {r.status_code}")
                except httpx.HTTPError as exc:
                    if not stop.is_set():
                        soak.failures.append(f"{path}: {type(exc).__name__}")


def run_soak(
    tmp: Path,
    *,
    gpus: int = 64,
    hours: float = 24.0,
    speed: float = 400.0,
    interval_s: float = 30.0,
    flush_s: float = 60.0,
    compact_after_s: float = 3600.0,
    scrape_every_s: float = 2.0,
    view_every_s: float = 5.0,
    sample_every_s: float = 5.0,
    wall_limit_s: float = 3600.0,
    view_range: str | None = None,
) -> Soak:
    """Run the agent until `hours` of simulated time passed (or `wall_limit_s`); see the
    module doc."""
    hosts = max(1, gpus // 8)
    data = tmp / "store"
    port = free_port()
    cfg = tmp / "gpulens.toml"
    cfg.write_text(
        f'data_dir = "{data}"\nhost = "soak"\n'
        f'[collect]\ninterval_seconds = {interval_s}\ncollectors = ["simulated"]\n'
        f"[store]\nretention_days = 1\nflush_seconds = {flush_s}\n"
        f"compact_after_seconds = {compact_after_s}\n"
        f"[simulated]\nhosts = {hosts}\ngpus_per_host = {min(gpus, 8)}\n"
        f'[agent]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    env = clean_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--config", str(cfg), "--speed", str(speed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    soak, stop = Soak(), threading.Event()
    agent = psutil.Process(proc.pid)
    started = time.monotonic()
    try:
        with httpx.Client() as client:
            while True:
                assert proc.poll() is None, "the agent exited before it answered"
                try:
                    got = scrape(client, url)
                    if "sim_now" in got:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() - started > 120:
                    raise TimeoutError("the agent did not answer within 120 s")
                time.sleep(0.2)
            sim0, wall0 = got["sim_now"], time.monotonic()
            loaders = [
                threading.Thread(target=load, args=(url, p, e, stop, soak), daemon=True)
                for p, e in (
                    (["/metrics"], scrape_every_s),
                    (
                        ["/api/now", "/api/fleet" + (f"?range={view_range}" if view_range else "")],
                        view_every_s,
                    ),
                )
            ]
            for t in loaders:
                t.start()
            t0 = time.monotonic()
            while proc.poll() is None:
                time.sleep(sample_every_s)
                got = scrape(client, url)
                sim_h = (got.get("sim_now", sim0) - sim0) / 3600
                behind = (time.monotonic() - wall0) - sim_h * 3600 / speed  # wall s behind pace
                soak.samples.append(
                    Sample(
                        time.monotonic() - t0,
                        sim_h,
                        agent.memory_info().rss,
                        agent.num_fds(),
                        segments(data),
                        max(0.0, behind),
                        got.get("gpulens_ticks_missed_total", 0.0),
                    )
                )
                if sim_h >= hours or time.monotonic() - started > wall_limit_s:
                    break
    finally:
        stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, soak.stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, soak.stderr = proc.communicate()
        soak.exit_code = proc.returncode
    return soak


def _floor(samples: list[Sample]) -> int:
    """The fewest open file descriptors among `samples`."""
    return min(s.fds for s in samples)


def verdict(soak: Soak, warmup_h: float) -> dict[str, float]:
    """RSS growth (%) from the first sample after `warmup_h` to the last and the largest after
    it, fd and segment ranges after the warm-up (fd growth: the floor of the last third of the
    samples over the first third's), and how far behind the pace the ticks were."""
    after = [s for s in soak.samples if s.sim_h >= warmup_h] or soak.samples
    base = after[0].rss
    return {
        "rss_first_mb": base / 1e6,
        "rss_last_mb": after[-1].rss / 1e6,
        "rss_growth_pct": 100 * (after[-1].rss / base - 1),
        "rss_max_growth_pct": 100 * (max(s.rss for s in after) / base - 1),
        "fds_min": min(s.fds for s in after),
        "fds_max": max(s.fds for s in after),
        # a leak raises the floor; a maintenance pass open at one sample only lifts that one
        "fds_growth": _floor(after[-max(1, len(after) // 3) :])
        - _floor(after[: max(1, len(after) // 3)]),
        "segments_max": max(s.segments for s in soak.samples),
        "segments_last": soak.samples[-1].segments,
        "lag_max_s": max(s.lag_s for s in soak.samples),
        "lag_median_s": sorted(s.lag_s for s in soak.samples)[len(soak.samples) // 2],
        "sim_hours": soak.samples[-1].sim_h,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--speed", type=float, default=400.0)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--flush", type=float, default=60.0)
    ap.add_argument("--scrape-every", type=float, default=2.0)
    ap.add_argument("--view-every", type=float, default=5.0)
    ap.add_argument("--sample-every", type=float, default=5.0)
    ap.add_argument("--warmup-hours", type=float, default=1.0)
    ap.add_argument("--wall-limit", type=float, default=3600.0, help="stop after this (s)")
    ap.add_argument("--view-range", default=None, help="the Fleet page's range (default 6h)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        soak = run_soak(
            Path(tmp),
            gpus=args.gpus,
            hours=args.hours,
            speed=args.speed,
            interval_s=args.interval,
            flush_s=args.flush,
            scrape_every_s=args.scrape_every,
            view_every_s=args.view_every,
            sample_every_s=args.sample_every,
            wall_limit_s=args.wall_limit,
            view_range=args.view_range,
        )
    v = verdict(soak, args.warmup_hours)
    wall = soak.samples[-1].wall_s
    print(f"agent on {args.gpus} simulated GPUs every {args.interval:g} s at {args.speed:g}× for "
          f"{v['sim_hours']:.1f} simulated hours in {wall / 60:.1f} min; /metrics every "
          f"{args.scrape_every:g} s and /api/now + /api/fleet (range {args.view_range or '6h'}) "
          f"every {args.view_every:g} s (wall); "
          f"{soak.requests} requests, {len(soak.failures)} failed; exit code {soak.exit_code}; "
          f"load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| sim h | wall min | RSS MB | open fds | segments | behind pace s | missed ticks |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    step = max(1, len(soak.samples) // 24)
    shown = soak.samples[::step]
    if shown[-1] is not soak.samples[-1]:
        shown.append(soak.samples[-1])
    for s in shown:
        print(f"| {s.sim_h:.1f} | {s.wall_s / 60:.1f} | {s.rss / 1e6:.0f} | {s.fds} | "
              f"{s.segments} | {s.lag_s:.2f} | {s.missed:.0f} |")  # fmt: skip
    print(f"\nafter {args.warmup_hours:g} simulated h: RSS {v['rss_first_mb']:.0f} → "
          f"{v['rss_last_mb']:.0f} MB ({v['rss_growth_pct']:+.1f} %, largest "
          f"{v['rss_max_growth_pct']:+.1f} %); open fds {v['fds_min']:.0f}–{v['fds_max']:.0f}; "
          f"segments at most {v['segments_max']:.0f} (last {v['segments_last']:.0f}); behind pace "
          f"median {v['lag_median_s']:.2f} s, max {v['lag_max_s']:.2f} s")  # fmt: skip
    for failure in sorted(set(soak.failures))[:5]:
        print(f"- {failure}")


if __name__ == "__main__":
    main()
