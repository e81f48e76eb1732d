"""The live refresh's interval frame: DuckDB SQL over the recent window against numpy.

    python bench/live_frame.py [--repeats 7]

A LiveState is fed 8 simulated GPUs (one host) for 5 simulated minutes of 1 s ticks through
the real collectors, scheduler and rate stage, refreshing at each closed minute as the agent
does, in a fresh interpreter per path:

- `numpy`: `LiveState._refresh` as it is (`store/recent_frame.recent_intervals`);
- `sql, connection released`: the frame from `gpu_intervals(window, use_cache=False)` and the
  window's DuckDB connection closed after each refresh (the agent with no viewer did so);
- `sql, connection kept`: the same with the connection kept between refreshes.

Each child then times `--repeats` more refreshes (CPU time of the process, median) and the
frame call alone, and reports its RSS after the fed minutes (VmRSS), its peak (VmHWM) and
whether DuckDB was loaded. Prints one line per path and figure, with the load average.
Linux (/proc/self/status).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent_process import fed_live_state

NS = 1_000_000_000
MODES = ("numpy", "sql-released", "sql-kept")


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def child(mode: str, repeats: int, gpus: int = 8, seconds: int = 300) -> dict[str, Any]:
    """Feed and refresh a LiveState the way `mode` does; its figures."""
    import gpulens.app.live as live_module
    from gpulens.app.lean import keep_pandas_out

    keep_pandas_out()
    frame_fn = live_module.recent_intervals
    if mode != "numpy":
        from gpulens.store.frames import gpu_intervals

        def frame_fn(window: Any, step_s: float, start_ns: int, end_ns: int) -> Any:
            return gpu_intervals(window, step_s, start_ns, end_ns, use_cache=False)

        live_module.recent_intervals = frame_fn  # type: ignore[assignment]
    release = mode == "sql-released"
    live = fed_live_state(gpus, seconds, 300.0, release)
    rss, hwm = _status("VmRSS"), _status("VmHWM")
    refresh_ms: list[float] = []
    frame_ms: list[float] = []
    latest = live.window.latest_ns
    assert latest is not None
    end = (latest // (60 * NS) + 1) * 60 * NS
    for _ in range(repeats):
        cpu0 = time.process_time()
        live.refresh()
        if release:
            live.release()
        refresh_ms.append(1e3 * (time.process_time() - cpu0))
        cpu0 = time.process_time()
        frame = frame_fn(live.window, 60.0, end - 180 * NS, end)
        if release:
            live.release()
        frame_ms.append(1e3 * (time.process_time() - cpu0))
    return {
        "rows": frame.num_rows,
        "refresh_ms": statistics.median(refresh_ms),
        "frame_ms": statistics.median(frame_ms),
        "rss_mb": rss,
        "hwm_mb": hwm,
        "duckdb": "duckdb" in sys.modules,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return
    rss: dict[str, float] = {}
    for mode in MODES:
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--repeats", str(args.repeats)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout)
        print(f"{mode}: one refresh {r['refresh_ms']:.1f} ms CPU (frame alone "
              f"{r['frame_ms']:.1f} ms, {r['rows']} rows; median of {args.repeats}); "
              f"RSS after 5 min {r['rss_mb']:.1f} MB, peak {r['hwm_mb']:.1f} MB; "
              f"DuckDB loaded: {r['duckdb']}")  # fmt: skip
        print(f"{mode}: a refresh a minute is {r['refresh_ms'] / 600:.3f} % of a core")
        rss[mode] = r["rss_mb"]
    for mode in MODES[1:]:
        print(f"numpy RSS below {mode}: {rss[mode] - rss['numpy']:.1f} MB")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
