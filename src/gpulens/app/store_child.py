"""Work on the store that needs DuckDB, run by a recorder in a short-lived child process.

An agent nobody views still runs the findings rules every few minutes (to keep the findings in
/metrics current), and a recorder writes the frames cache of each day once it closes. In the
recorder's own process either would load DuckDB and the analysis code for good (a shared
library is never unloaded): ~60 MB held for the life of an agent whose recording needs ~140 MB.
Here they run in a child process that reads the same store and exits, its memory going with it:

- `findings_in_child`: the same `analysis.analyse` the dashboard runs, on the same store,
  settings and window; the findings come back as JSON (`Finding.to_dict`, read with
  `Finding.from_dict`). A pass costs the child's start (its imports, ~0.7 s of CPU) on top of
  the analysis; the agent pays it only while nobody views the dashboard, when passes are
  `IDLE_FINDINGS_FACTOR` times rarer (app/agent.py).
- `cache_in_child`: `frames.materialize_closed_days`, started only when a closed day has no
  fresh cache file (the check reads file listings, not data: no DuckDB).
- `compact_in_child`: the merges that hold up to a day in memory (a closed day's, today's
  first-level files'), which the maintenance pass leaves to it (`compact(defer_large=True)`)
  when one is due: about once an hour and once a day. In the agent they would raise its heap
  by tens of MB an hour (hundreds at midnight) that glibc keeps.

`python -m gpulens.app.store_child` is the child: a JSON request on stdin, the answer as JSON on
stdout; one line on stderr and exit code 1 when the work fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from gpulens.analyze.prices import Prices
from gpulens.clock import Clock, FakeClock, SystemClock
from gpulens.config import Config
from gpulens.errors import StoreError
from gpulens.findings.model import Finding
from gpulens.store.compact import CompactionResult
from gpulens.store.location import StorePath, open_location
from gpulens.store.maintenance import CompactLarge, Materialize

if TYPE_CHECKING:
    from gpulens.store import Store

#: how long a findings pass may take before it is given up (the next one starts afresh)
CHILD_TIMEOUT_S = 300.0
#: how long writing the frames cache of the closed days may take (a day of a large node)
CACHE_TIMEOUT_S = 3600.0
#: how often the parent looks at its stop signal while the child runs
POLL_S = 0.25


class ChildError(StoreError):
    """The child failed, timed out or was stopped; the message says which."""


_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def kill_children() -> None:
    """Kill the children still running (a process about to end without waiting for them)."""
    with _running_lock:
        for proc in _running:
            proc.kill()


def findings_in_child(
    cfg: Config,
    start_ns: int,
    end_ns: int,
    stop: threading.Event,
    timeout_s: float = CHILD_TIMEOUT_S,
) -> list[Finding]:
    """The findings of `cfg`'s store over [start_ns, end_ns), computed by a child process
    (ChildError when it fails, `stop` is set or `timeout_s` passes)."""
    request = {
        "job": "findings",
        "values": dict(cfg.values),
        "sources": dict(cfg.sources),
        "start_ns": int(start_ns),
        "end_ns": int(end_ns),
    }
    answer = _run("the findings pass", request, stop, timeout_s)
    try:
        return [Finding.from_dict(d) for d in answer["findings"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ChildError(f"the findings pass answered what it should not: {exc}") from exc


def cache_in_child(
    data_dir: StorePath,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
    timeout_s: float = CACHE_TIMEOUT_S,
    options: Mapping[str, str | None] | None = None,
) -> tuple[int, int]:
    """`frames.materialize_closed_days` in a child process, started only when a closed day
    needs its cache: (days written, days that failed). `options`: an object store's
    credentials (`Config.store_options`), which the child needs to open it again."""
    from gpulens.store.frame_cache import closed_days_to_cache

    clock = clock or SystemClock()
    data_dir = open_location(data_dir, options)  # a path given as text, as maintain() may
    if not closed_days_to_cache(data_dir, clock=clock):
        return 0, 0
    request = {"job": "cache", **_where(data_dir, options), "now_ns": clock.now_ns()}
    answer = _run("the frames cache", request, stop or threading.Event(), timeout_s)
    try:
        return int(answer["written"]), int(answer["failed"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ChildError(f"the frames cache answered what it should not: {exc!r}") from exc


def compact_in_child(
    data_dir: StorePath,
    clock: Clock | None = None,
    *,
    host: str | None,
    min_age_seconds: float,
    stop: threading.Event | None = None,
    timeout_s: float = CACHE_TIMEOUT_S,
    options: Mapping[str, str | None] | None = None,
) -> CompactionResult:
    """`compact` (every merge due, the large ones included) in a child process; `options` as
    for `cache_in_child`."""
    clock = clock or SystemClock()
    request = {
        "job": "compact",
        **_where(data_dir, options),
        "now_ns": clock.now_ns(),
        "host": host,
        "min_age_seconds": float(min_age_seconds),
    }
    answer = _run("the compaction", request, stop or threading.Event(), timeout_s)
    result = CompactionResult()
    try:
        for name in result.counts():
            setattr(result, name, int(answer[name]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ChildError(f"the compaction answered what it should not: {exc!r}") from exc
    return result


def cache_for(cfg: Config, stop: threading.Event | None = None) -> Materialize:
    """How a recorder of `cfg` hands the frames cache of closed days to `cache_in_child`."""
    return partial(cache_in_child, stop=stop, options=cfg.store_options)


def compact_large_for(cfg: Config, stop: threading.Event | None = None) -> CompactLarge:
    """How a recorder of `cfg` hands its large merges to `compact_in_child`."""
    return partial(
        compact_in_child,
        host=cfg.host,
        min_age_seconds=float(cfg.get("store.compact_after_seconds")),
        stop=stop,
        options=cfg.store_options,
    )


def _where(data_dir: StorePath, options: Mapping[str, str | None] | None) -> dict[str, Any]:
    """The part of a request that names the store, so that the child can open it again."""
    return {"data_dir": str(open_location(data_dir, options)), "options": dict(options or {})}


def _store(request: dict[str, Any]) -> StorePath:
    return open_location(request["data_dir"], request.get("options") or {})


def _run(
    what: str, request: dict[str, Any], stop: threading.Event, timeout_s: float
) -> dict[str, Any]:
    # -P: the agent's working directory is not put first on the child's module path
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "gpulens.app.store_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _running_lock:
        _running.add(proc)
    try:
        out, err = _wait(what, proc, json.dumps(request), stop, timeout_s)
    finally:
        with _running_lock:
            _running.discard(proc)
    if proc.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise ChildError(f"{what} failed: {lines[-1] if lines else proc.returncode}")
    try:
        answer = json.loads(out)
    except ValueError as exc:
        raise ChildError(f"{what} answered what it should not: {exc}") from exc
    if not isinstance(answer, dict):
        raise ChildError(f"{what} answered what it should not: {out[:80]!r}")
    return answer


def _wait(
    what: str, proc: subprocess.Popen[str], request: str, stop: threading.Event, timeout_s: float
) -> tuple[str, str]:
    """(stdout, stderr) of `proc` once it ends; killed at `stop` or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    sent: str | None = request
    while True:
        try:
            return proc.communicate(sent, timeout=POLL_S)
        except subprocess.TimeoutExpired:
            sent = None  # the request went with the first call
            if stop.is_set() or time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                why = "was stopped" if stop.is_set() else f"gave up after {timeout_s:g} s"
                raise ChildError(f"{what} {why}") from None


def findings_of(
    store: Store,
    start_ns: int,
    end_ns: int,
    prices: Prices | None,
    region: str | float,
    quotas: dict[str, float] | None,
    analysis: dict[str, Any],
) -> list[Finding]:
    """The findings pass over [start_ns, end_ns) of `store` (in the agent while someone views
    the dashboard, in the child otherwise)."""
    from gpulens.app.analysis import analyse

    view = analyse(
        store,
        start_ns=start_ns,
        end_ns=end_ns,
        prices=prices,
        region=region,
        quotas=quotas,
        **analysis,
        findings_only=True,
    )
    return view.findings


def analyse_window(cfg: Config, start_ns: int, end_ns: int) -> list[dict[str, Any]]:
    """The findings child's work: the findings of `cfg`'s store over the window, as dicts."""
    from gpulens.app import session
    from gpulens.store import Store

    with Store(cfg.data_dir) as store:
        found = findings_of(
            store,
            start_ns,
            end_ns,
            session.prices(cfg),
            session.carbon_region(cfg),
            session.quotas(cfg),
            session.analysis_settings(cfg),
        )
    return [f.to_dict() for f in found]


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    job = request["job"]
    if job == "findings":
        cfg = Config(request["values"], request["sources"])
        return {"findings": analyse_window(cfg, int(request["start_ns"]), int(request["end_ns"]))}
    if job == "cache":
        from gpulens.store.frames import materialize_closed_days

        clock = FakeClock(int(request["now_ns"]))
        written, failed = materialize_closed_days(_store(request), clock=clock)
        return {"written": written, "failed": failed}
    if job == "compact":
        from gpulens.store.compact import compact

        result = compact(
            _store(request),
            host=request["host"],
            clock=FakeClock(int(request["now_ns"])),
            min_age_seconds=float(request["min_age_seconds"]),
        )
        return dict(result.counts())
    raise ValueError(f"no such job {job!r}")


def main() -> int:
    """The child: a request on stdin, the answer on stdout."""
    from gpulens.app.lean import keep_pandas_out

    keep_pandas_out()
    answer_to = sys.stdout
    sys.stdout = sys.stderr  # whatever the work prints cannot garble the answer
    try:
        answer = _answer(json.loads(sys.stdin.read()))
    except Exception as exc:  # one line for the parent's log
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    json.dump(answer, answer_to)
    answer_to.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
