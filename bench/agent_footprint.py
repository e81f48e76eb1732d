"""The agent's footprint on a node: RSS, CPU, threads and open files over time, as scraped.

    python bench/agent_footprint.py [--seconds 120] [--scrape-every 15] [--gpus 8]

Starts `gpulens agent` as a separate process on loopback (simulated collector, 1 host × 8 GPUs,
1 s interval, default flush), scrapes its `/metrics` every `--scrape-every` seconds as a
Prometheus server would, opens no dashboard page, and samples the process every 5 s: resident
memory, CPU (user + system) since the previous sample, threads and open file descriptors.
Resident memory is split into anonymous pages (the heap: Python objects, Arrow and DuckDB
buffers) and file pages (the shared libraries' code and data that were touched: DuckDB's and
pyarrow's are most of it). Prints one row per sample, then the CPU as a share of one core
over the whole window after `--warmup`, and the RSS growth from the first to the last sample.
Target (issue 15): RSS ≤ 150 MB and ≤ 1 % of one core of the agent's own work, both flat.

The simulator's own cost is then measured apart and taken off: the same simulated fleet's
sources (the simulated NVML binding under the real NVML collector, and the simulated host
collector) run here for as many 1 s ticks as the agent ran, on a clock that steps a second
between ticks and runs in real time within one (as the agent's does: each call then sees a
new instant, which the simulated GPUs answer by recomputing their state), and the CPU
time of this thread inside the simulated binding's calls and the simulated host collector is
what a real node replaces with NVML's calls and /proc reads. "Agent's own" = the agent
process's CPU minus that share (on the same machine, so under the same load).

Work the agent hands to short-lived child processes (its findings pass while nobody views the
dashboard, the frames cache of a closed day: app/store_child.py) is counted as the agent's:
the CPU figures include the children's CPU time once they exit (the agent waits for them), and
a thread watches the agent's children every 0.2 s for their peak RSS, printed apart (the
memory is the node's only while a child runs, a second or two every few minutes).

`--history-s N` first writes N seconds of the same simulated fleet into the agent's store, as
10 s segments, compacted as the agent's maintenance would have done it over those N seconds
(a pass every half of `store.compact_after_seconds`, on a simulated clock): the store of an
agent that has run for N seconds, so that a findings pass reads a full window. The CPU of the
passes is then most of the agent's, and they run every 15 minutes when nobody views the
dashboard: a run shorter than that sees one or none. After the run the script times that pass
over the last hour of the store (`--passes` runs of the child the agent starts, median), and
prints the agent's steady share: its CPU in the window without its children's, plus one pass
every `--idle-every` seconds.

`--dashboard` also GETs the dashboard's Fleet page data every 15 s, to show what a viewer adds.
`--hide pandas` runs the agent as if pandas were not installed (gpulens does not depend on it,
but pyarrow imports it at its first `pa.array` of a list when it is there: 36 MB here).
`--malloc-arenas N` sets MALLOC_ARENA_MAX=N for the agent (the agent caps them itself).
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
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from agent_process import clean_env, free_port, wait_ready
from gpulens.app import session
from gpulens.clock import FakeClock
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.config import load_config

SAMPLE_EVERY = 5.0


def poll(url: str, every: float, stop: threading.Event, failures: list[str]) -> None:
    while not stop.wait(every):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
        except OSError as exc:
            failures.append(f"{url}: {exc}")


def rss_split(pid: int) -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of `pid` (Linux /proc/PID/status)."""
    fields = {}
    with Path(f"/proc/{pid}/status").open(encoding="ascii") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) * 1024
    return fields.get("RssAnon", 0), fields.get("RssFile", 0)


def rss_by_part(pid: int) -> dict[str, int]:
    """Resident bytes of `pid` by what they are (/proc/PID/smaps): anonymous memory (the heap:
    Python objects, Arrow's and DuckDB's buffers, thread stacks), then the pages touched of
    DuckDB's library, Arrow's (pyarrow's), numpy's, the interpreter's and the rest."""
    parts: dict[str, int] = {}
    where = "anonymous"
    with Path(f"/proc/{pid}/smaps").open(encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                path = head[5] if len(head) > 5 else ""
                where = (
                    "anonymous" if not path.startswith("/")
                    else "duckdb" if "duckdb" in path
                    else "arrow (pyarrow)" if "/pyarrow/" in path
                    else "numpy (+ OpenBLAS)" if "numpy" in path
                    else "python" if "libpython" in path or Path(path).name.startswith("python3")
                    else "other libraries"
                )  # fmt: skip
            elif line.startswith("Rss:"):
                parts[where] = parts.get(where, 0) + int(head[1]) * 1024
    return parts


def hide(root: Path, packages: list[str]) -> str:
    """A folder that, first on the path, makes importing each of `packages` fail as if it were
    not installed."""
    for name in packages:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"raise ImportError('{name} is hidden by bench/agent_footprint.py --hide')\n"
        )
    return str(root)


class TimedBinding:
    """A binding whose every call's CPU time (this thread's) is added up."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.inside_ns = 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)
        if not callable(fn):
            return fn

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.inside_ns += time.thread_time_ns() - t0

        self.__dict__[name] = timed
        return timed


class TickClock(FakeClock):
    """A FakeClock set at each tick that also moves in real time after it is set."""

    def set(self, ns: int) -> None:
        super().set(ns)
        self._set_at = time.perf_counter_ns()

    def now_ns(self) -> int:
        return super().now_ns() + time.perf_counter_ns() - self._set_at


def simulator_cpu_per_tick(gpus: int, ticks: int) -> tuple[float, float]:
    """(simulated NVML binding, simulated host collector) CPU seconds per 1 s tick of the
    fleet the agent runs (1 host × `gpus`), over its first `ticks` seconds."""
    cfg = load_config(
        env={},
        overrides={"collect.collectors": ["simulated"], "simulated.hosts": 1,
                   "simulated.gpus_per_host": gpus},
    )  # fmt: skip
    start = time.time_ns() // 1_000_000_000 * 1_000_000_000
    clock = TickClock(start)
    clock.set(start)
    fleet = session.simulated_fleet(cfg, start)
    host = fleet.hosts[0]
    binding = TimedBinding(fleet.binding(host, clock))
    nvml = NvmlCollector(binding, host, fleet.identity(host), name=f"nvml@{host}")
    host_collector = fleet.host_collector(host)
    host_ns = 0
    for i in range(ticks):
        now = start + i * 1_000_000_000
        clock.set(now)
        list(nvml.collect(now))
        t0 = time.thread_time_ns()
        list(host_collector.collect(now))
        host_ns += time.thread_time_ns() - t0
    return binding.inside_ns / 1e9 / ticks, host_ns / 1e9 / ticks


def cpu_seconds(proc: psutil.Process) -> float:
    """The process's CPU time, and its children's once they have exited."""
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


class ChildWatch:
    """Watches `proc`'s child processes every 0.2 s: how many were seen, their peak RSS."""

    def __init__(self, proc: psutil.Process, stop: threading.Event) -> None:
        self.proc, self.stop = proc, stop
        self.seen: set[int] = set()
        self.peak_rss = 0
        self.peak_total = 0  # the agent's RSS and its children's, at the same moment
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                children = self.proc.children()
                own = self.proc.memory_info().rss
                rss = 0
                for child in children:
                    self.seen.add(child.pid)
                    rss += child.memory_info().rss
            except psutil.Error:
                continue
            self.peak_rss = max(self.peak_rss, rss)
            if children:
                self.peak_total = max(self.peak_total, own + rss)


def children_cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.children_user + t.children_system)


def write_history(config: Path, seconds: float) -> None:
    """`seconds` of the simulated fleet the agent runs, up to now, into its store, compacted
    as the agent's maintenance passes would have left it."""
    from gpulens.app.generate import generate
    from gpulens.store.compact import compact

    cfg = load_config(config, env={}, overrides={"store.flush_seconds": 10.0})
    now = time.time_ns() // 1_000_000_000 * 1_000_000_000
    start = now - round(seconds * 1e9)
    generate(cfg, start, now, workers=1)
    after = float(cfg.get("store.compact_after_seconds"))
    every = round(max(60.0, after / 2) * 1e9)
    for t in range(start + every, now + 1, every):
        compact(cfg.data_dir, clock=FakeClock(t), min_age_seconds=after)


def pass_cpu(config: Path, window_s: float, runs: int) -> list[float]:
    """CPU seconds of the findings child over the last `window_s` of the store, per run."""
    import json
    import resource

    cfg = load_config(config, env={})
    now = time.time_ns()
    request = json.dumps({
        "job": "findings", "values": dict(cfg.values), "sources": dict(cfg.sources),
        "start_ns": now - round(window_s * 1e9), "end_ns": now,
    })  # fmt: skip
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, "-P", "-m", "gpulens.app.store_child"],
            input=request, text=True, capture_output=True, check=True, env=clean_env(),
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--dashboard", action="store_true", help="also poll the Fleet page's data")
    ap.add_argument("--hide", nargs="*", default=[], help="packages to run without")
    ap.add_argument("--malloc-arenas", type=int, default=None)
    ap.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for the agent")
    ap.add_argument("--history-s", type=float, default=0.0, help="history written first")
    ap.add_argument("--idle-every", type=float, default=900.0, help="unviewed pass period")
    ap.add_argument("--passes", type=int, default=3, help="timed findings passes")
    args = ap.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "gpulens.toml"
        cfg.write_text(
            f'data_dir = "{Path(tmp) / "store"}"\n[collect]\ninterval_seconds = 1.0\n'
            f'collectors = ["simulated"]\n[simulated]\nhosts = 1\ngpus_per_host = {args.gpus}\n'
        )
        env = clean_env()
        if args.hide:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (hide(Path(tmp) / "hidden", args.hide), env.get("PYTHONPATH")) if p
            )
        if args.malloc_arenas is not None:
            env["MALLOC_ARENA_MAX"] = str(args.malloc_arenas)
        env.update(item.split("=", 1) for item in args.env)
        if args.history_s > 0:
            write_history(cfg, args.history_s)
        popen = subprocess.Popen(
            [sys.executable, "-m", "gpulens", "agent", "--config", str(cfg),
             "--listen", f"127.0.0.1:{port}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        proc = psutil.Process(popen.pid)
        stop, failures = threading.Event(), []
        started = time.monotonic()
        try:
            wait_ready(base + "/metrics", started + 60)
            ready = time.monotonic() - started
            pollers = [(base + "/metrics", args.scrape_every)]
            if args.dashboard:
                pollers.append((base + "/api/fleet", 15.0))
            children = ChildWatch(proc, stop)
            for url, every in pollers:
                threading.Thread(
                    target=poll, args=(url, every, stop, failures), daemon=True
                ).start()
            rows = []
            last_cpu, last_t = cpu_seconds(proc), time.monotonic()
            first_cpu, first_children = last_cpu, children_cpu(proc)
            while time.monotonic() - started < args.seconds:
                time.sleep(SAMPLE_EVERY)
                now, cpu = time.monotonic(), cpu_seconds(proc)
                rss, fds = proc.memory_info().rss, proc.num_fds()
                share = (cpu - last_cpu) / (now - last_t)
                anon, file = rss_split(popen.pid)
                rows.append((now - started, rss, anon, file, share, proc.num_threads(), fds))
                if now - started < args.warmup:
                    first_cpu, first_children = cpu, children_cpu(proc)
                last_cpu, last_t = cpu, now
            parts = rss_by_part(popen.pid)
            children_s = children_cpu(proc) - first_children
        finally:
            stop.set()
            popen.send_signal(signal.SIGTERM)
            popen.wait(timeout=60)
        passes = pass_cpu(cfg, 3600.0, args.passes) if args.passes else []
    extra = "".join(
        [", without " + ", ".join(args.hide) if args.hide else "",
         f", MALLOC_ARENA_MAX={args.malloc_arenas}" if args.malloc_arenas is not None else "",
         "".join(f", {item}" for item in args.env)]
    )  # fmt: skip
    print(f"agent on {args.gpus} simulated GPUs, /metrics every {args.scrape_every:g} s"
          f"{', Fleet page every 15 s' if args.dashboard else ''}{extra}; answering after "
          f"{ready:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| t s | RSS MB | anon MB | file MB | CPU % of a core | threads | open fds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for t, rss, anon, file, cpu, threads, fds in rows:
        print(f"| {t:.0f} | {rss / 1e6:.0f} | {anon / 1e6:.0f} | {file / 1e6:.0f} | "
              f"{100 * cpu:.2f} | {threads} | {fds} |")  # fmt: skip
    after = [r for r in rows if r[0] >= args.warmup]
    window = rows[-1][0] - (after[0][0] - SAMPLE_EVERY)
    cpu_share = 100 * (last_cpu - first_cpu) / window
    growth = 100 * (rows[-1][1] / after[0][1] - 1)
    print(f"\nCPU after {args.warmup:g} s: {cpu_share:.2f} % of a core; RSS "
          f"{after[0][1] / 1e6:.0f} → {rows[-1][1] / 1e6:.0f} MB ({growth:+.1f} %); "
          f"failed requests: {len(failures)}")  # fmt: skip
    print(f"child processes (findings passes, frames cache): {len(children.seen)} seen; peak RSS "
          f"{children.peak_rss / 1e6:.0f} MB, with the agent's {children.peak_total / 1e6:.0f} MB "
          "while one ran")  # fmt: skip
    print("\nRSS at the end by part: " + "; ".join(
        f"{name} {size / 1e6:.0f} MB" for name, size in sorted(parts.items(), key=lambda kv: -kv[1])
    ))  # fmt: skip
    binding_s, host_s = simulator_cpu_per_tick(args.gpus, max(60, round(args.seconds)))
    sim_share = 100 * (binding_s + host_s)  # one tick a second
    print(f"simulator: {1e3 * binding_s:.2f} ms (simulated NVML binding) + {1e3 * host_s:.2f} ms "
          f"(simulated host) of CPU per tick = {sim_share:.2f} % of a core; the agent's own "
          f"work: {cpu_share - sim_share:.2f} % of a core; load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip
    if passes:
        median = sorted(passes)[len(passes) // 2]
        base = 100 * (last_cpu - first_cpu - children_s) / window - sim_share
        steady = base + 100 * median / args.idle_every
        print(f"findings pass over the last hour in a child: {median:.2f} s of CPU (median of "
              f"{len(passes)}: {', '.join(f'{x:.2f}' for x in passes)}); children's CPU in the "
              f"window {children_s:.2f} s; the agent's own work without its children "
              f"{base:.2f} % of a core; steady, with one pass every {args.idle_every:g} s: "
              f"{steady:.2f} % of a core")  # fmt: skip


if __name__ == "__main__":
    main()
