"""Three parts of the agent's footprint, each measured alone.

    python bench/agent_parts.py [--seconds 20]

1. The HTTP server's housekeeping: the CPU of an idle uvicorn server for `--seconds`, with
   uvicorn's own loop (a tick every 0.1 s) and with the agent's (`app/agent.py`'s `_Server`:
   a tick a second, woken by a stop signal), in this process, one after the other.
2. What a DuckDB connection costs to open and close (the recent window opens one per
   unviewed refresh): CPU per open + query + close, over 50.
3. The recent window's connection kept or released: a LiveState fed 8 simulated GPUs for
   6 simulated minutes (ticks of 1 s on a stepped clock, a refresh at each closed minute, as
   the agent does), in two fresh interpreters, one releasing the connection after each
   refresh: the RSS each ends with.

Prints one line per figure, with the load average. Linux (VmRSS) for the third part.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from agent_process import fed_live_state


def idle_server_cpu(seconds: float, agent_loop: bool) -> float:
    """% of a core an idle server used over `seconds` (after a 2 s start)."""
    import uvicorn

    from gpulens.app.agent import _Server

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = _Server(config, on_stop=lambda: None) if agent_loop else uvicorn.Server(config)
    used: list[float] = []

    def measure() -> None:
        time.sleep(2.0)
        cpu0, wall0 = time.process_time(), time.monotonic()
        time.sleep(seconds)
        used.append(100 * (time.process_time() - cpu0) / (time.monotonic() - wall0))
        server.should_exit = True

    threading.Thread(target=measure, daemon=True).start()
    server.run()
    return used[0]


def connect_cpu_ms(n: int = 50) -> float:
    import duckdb

    duckdb.connect(":memory:").close()
    cpu0 = time.process_time()
    for _ in range(n):
        con = duckdb.connect(":memory:", config={"threads": 1})
        con.execute("SELECT 1")
        con.close()
    return 1e3 * (time.process_time() - cpu0) / n


def live_rss(release: bool, gpus: int = 8, seconds: int = 360) -> float:
    """RSS (MB) of this process after feeding a LiveState `seconds` of ticks."""
    from gpulens.app.lean import keep_pandas_out

    keep_pandas_out()
    fed_live_state(gpus, seconds, 180.0, release)
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--live-rss", choices=["kept", "released"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.live_rss:
        print(f"{live_rss(args.live_rss == 'released'):.1f}")
        return
    for agent_loop, name in ((False, "uvicorn's loop (0.1 s tick)"), (True, "the agent's loop")):
        cpu = idle_server_cpu(args.seconds, agent_loop)
        print(f"idle HTTP server, {name}: {cpu:.3f} % of a core over {args.seconds:g} s")
    print(f"DuckDB in-memory connection, open + query + close: {connect_cpu_ms():.1f} ms of CPU")
    for mode in ("kept", "released"):
        out = subprocess.run(
            [sys.executable, __file__, "--live-rss", mode],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        print(f"LiveState on 8 GPUs after 6 simulated minutes, window connection {mode}: "
              f"{out.stdout.strip()} MB RSS")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
