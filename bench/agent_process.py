"""What the bench scripts that start `gpulens agent` share: a free loopback port, an
environment without GPULENS_* settings, and waiting for the agent to answer."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from typing import Any


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This process's environment without GPULENS_* settings (the config file decides)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}


def wait_ready(url: str, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until `url` answers 200 or `deadline` (time.monotonic()) passes; SystemExit if the agent
    (`proc`, when given) exits first or never answers."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the agent exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the agent did not answer {url} in time")


def fed_live_state(gpus: int, seconds: int, keep_s: float, release: bool) -> Any:
    """A LiveState fed `seconds` one-second ticks of one simulated host with `gpus` GPUs, on a
    stepped clock, refreshed at each closed minute as the agent does (and, with `release`, its
    window's DuckDB connection released after each refresh, as an unviewed agent did)."""
    from gpulens.app import session
    from gpulens.app.live import LiveState
    from gpulens.clock import FakeClock
    from gpulens.collect.simulated import SimulatedFleet
    from gpulens.pipeline.rates import RateStage
    from gpulens.pipeline.scheduler import Scheduler
    from gpulens.pipeline.sinks import DiscardSink

    ns = 1_000_000_000
    start = 1_785_000_000 * ns
    clock = FakeClock(start)
    fleet = SimulatedFleet(hosts=1, gpus_per_host=gpus, start_ns=start)
    sched = Scheduler(
        session.fleet_collectors(fleet, clock), DiscardSink(), clock, rates=RateStage()
    )
    live = LiveState(60.0, keep_s)
    for s in range(seconds):
        clock.set(start + s * ns)
        tick = sched.tick(start + s * ns)
        live.on_tick(tick)
        if live.refresh_due(tick.ts):
            live.refresh()
            if release:
                live.release()
    return live
