"""The agent: one long-running process that records, exports and serves.

Collectors → store (as `record`), with every tick also feeding a `LiveState`, whose states are
refreshed when an interval closes (or when a viewer asks); a background pass runs the findings
rules over the recent history every `agent.findings_every_seconds` while someone looks at the
dashboard, and `IDLE_FINDINGS_FACTOR` times less often when nobody does (/metrics still shows
them), then in a short-lived child process (app/store_child.py), so that an agent nobody
views never loads DuckDB or the analysis code; and one HTTP port serves Prometheus `/metrics`,
the web dashboard and its JSON API.

With a `PacedClock` (`gpulens agent --speed`, simulated collectors only), background passes
(findings, compaction and retention) run on the simulated clock too, and the tick lag is how
far the ticks fall behind the pace on the wall clock. SIGTERM or SIGINT
stops the server, then the recorder, which flushes its buffer before the process exits; the
whole shutdown takes at most `SHUTDOWN_S` seconds whatever the sources are doing (collectors
run in daemon threads that are abandoned, not waited for).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from gpulens.analyze.prices import Prices
from gpulens.analyze.traces.limits import DEFAULT_LIMITS, TraceLimits
from gpulens.app import session
from gpulens.app.heap import release_memory, trim_heap
from gpulens.app.live import LiveState
from gpulens.app.store_child import (
    cache_for,
    compact_large_for,
    findings_in_child,
    findings_of,
)
from gpulens.app.traces import trace_limits
from gpulens.clock import Clock
from gpulens.collect.base import Collector
from gpulens.config import Config
from gpulens.errors import CollectError, ConfigError, StoreError
from gpulens.pipeline.scheduler import Scheduler, TickResult
from gpulens.store import SegmentWriter, Store, WriterStats
from gpulens.store.location import StorePath

if TYPE_CHECKING:
    from gpulens.app.cluster_feed import ClusterFeed
    from gpulens.findings.model import Finding

NS = 1_000_000_000
#: the bound on the shutdown after SIGTERM or SIGINT: the server, the recorder and its flush
SHUTDOWN_S = 5.0
#: of which this much is left for the interpreter to exit after the background work stopped
EXIT_MARGIN_S = 0.5
#: without a dashboard viewer in the last `VIEWER_S` seconds, findings run this many times
#: less often (every 15 min by default): they only feed /metrics then, and a pass over the
#: last hour costs ~1.5 s of CPU in a child (bench/README.md), ~0.5 % of a core if it ran
#: every 5 minutes
IDLE_FINDINGS_FACTOR = 15
VIEWER_S = 600.0
#: under --speed, findings passes are at least this far apart on the wall clock, and
#: maintenance passes (compaction, retention) at least MIN_WALL_WAIT_S
FINDINGS_MIN_WALL_S = 10.0
MIN_WALL_WAIT_S = 1.0
#: DuckDB settings of the agent's store connection: no cache of the Parquet files' bytes (the
#: store is local; DuckDB's external file cache would keep what every analysis read, up to its
#: memory limit, for as long as someone views the dashboard)
STORE_SETTINGS = ("SET enable_external_file_cache = false",)
#: the longest the agent keeps one store connection, in seconds (AgentContext.store_max_age_s)
STORE_MAX_AGE_S = 600.0
STORE_MIN_AGE_S = 30.0  # under --speed, on the wall clock
#: glibc malloc arenas the agent's threads share (glibc makes up to 8 per core; each keeps
#: the memory freed in it)
MALLOC_ARENAS = 2
#: the thread that reads the Cluster page from Prometheus (`agent --prometheus URL`)
CLUSTER_THREAD = "gpulens-cluster"
M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
#: seconds between the HTTP server's housekeeping ticks (uvicorn's own: 0.1 s, which costs
#: ~0.2 % of a core on an idle agent; the Date header it refreshes has a 1 s resolution, and a
#: stop signal wakes the loop at once)
SERVER_TICK_S = 1.0


def parse_listen(text: str) -> tuple[str, int]:
    """("host", port) from "HOST:PORT" ("[::1]:9477" for IPv6); ConfigError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"setting 'agent.listen' = {text!r} is not HOST:PORT: use e.g. 127.0.0.1:9477, "
            "0.0.0.0:9477 (needs a token) or [::1]:9477"
        )
    return host, int(port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (the only binds allowed without a token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class AgentContext:
    """What the web app serves from: the store, the live state, the settings that price and
    judge, the /metrics text, and the security settings."""

    data_dir: StorePath
    live: LiveState | None
    prices: Prices = field(default_factory=Prices)
    region: str | float = "world"
    quotas: dict[str, float] | None = None
    analysis: dict[str, Any] = field(default_factory=dict)
    token: str | None = None
    trace_dirs: tuple[Path, ...] = ()
    max_upload_bytes: int = 256 * 1024 * 1024
    trace_limits: TraceLimits = (
        DEFAULT_LIMITS  # `limits.*`: what an upload or an opened trace may hold
    )
    exposition: Callable[[], bytes] | None = None  # /metrics text; empty without it
    last_view: float | None = None  # time.monotonic() of the last dashboard request
    #: the store's connection is opened anew when it is older than this (seconds): what a
    #: connection keeps per file it has seen (schemas, DuckDB's state) would otherwise grow
    #: with every segment written and merged for as long as someone keeps viewing
    store_max_age_s: float = STORE_MAX_AGE_S
    _store_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _store: Store | None = field(default=None, repr=False)
    _store_opened: float = field(default=0.0, repr=False)
    store_opens: int = field(default=0, repr=False)  # connections opened so far
    #: the Cluster page's data (from a site's Prometheus, or this store); None: no such page
    cluster: ClusterFeed | None = None
    collecting: bool = True  # False: `agent --no-collect`, nothing recorded here

    def viewed(self) -> None:
        """A dashboard page or API request came in (the findings pass runs at full pace)."""
        self.last_view = time.monotonic()

    def viewer_recent(self, within_s: float = VIEWER_S) -> bool:
        return self.last_view is not None and time.monotonic() - self.last_view < within_s

    def with_store(self, fn: Callable[[Store], Any]) -> Any:
        """Run `fn(store)` on the shared read-only Store (one DuckDB connection: one at a
        time)."""
        with self._store_lock:
            return fn(self._open())

    def _open(self) -> Store:
        """The shared Store, opened when needed or too old (called with the store lock
        held)."""
        if self._store is not None and (
            time.monotonic() - self._store_opened > self.store_max_age_s
        ):
            self._store.close()
            self._store = None
        if self._store is None:
            self._store = Store(self.data_dir)
            self._store_opened = time.monotonic()
            self.store_opens += 1
            for setting in STORE_SETTINGS:
                with contextlib.suppress(StoreError):  # a DuckDB that has no such setting
                    self._store.query(setting)
        return self._store

    def try_with_store(self, fn: Callable[[Store], Any]) -> tuple[bool, Any]:
        """(True, `fn(store)`) when the shared Store is free now; (False, None) when another
        query holds it (an analysis can take seconds: a caller with a recent answer uses it)."""
        if not self._store_lock.acquire(blocking=False):
            return False, None
        try:
            return True, fn(self._open())
        finally:
            self._store_lock.release()

    def close(self) -> None:
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def context_from_config(cfg: Config) -> AgentContext:
    """An AgentContext with the prices, carbon region, quotas and thresholds of `cfg` (no live
    state or exporter yet: the agent sets those)."""
    return AgentContext(
        data_dir=cfg.data_dir,
        live=None,
        prices=session.prices(cfg),
        region=session.carbon_region(cfg),
        quotas=session.quotas(cfg),
        analysis=session.analysis_settings(cfg),
        token=cfg.get("agent.token") or None,
        trace_dirs=tuple(Path(p) for p in cfg.get("agent.trace_dirs")),
        max_upload_bytes=int(cfg.get("agent.max_upload_bytes")),
        trace_limits=trace_limits(cfg=cfg),
    )


WebApp = Callable[[AgentContext], Any]
"""Builds the ASGI app the agent serves from its context (present/web's `create_app`)."""
Metrics = Callable[[LiveState, AgentContext], Callable[[], bytes]]
"""Builds the /metrics text source over the live state (present/prometheus's exporter)."""


class Agent:
    """Collectors → store + live state, findings in the background, one HTTP port.

    The agent runs things and shows nothing: whoever composes the process (the CLI) hands it
    the web app and the /metrics source to serve."""

    def __init__(
        self,
        cfg: Config,
        collectors: Sequence[Collector],
        clock: Clock,
        *,
        web: WebApp,
        metrics: Metrics,
        collect: bool = True,
        cluster: ClusterFeed | None = None,
    ) -> None:
        """`collect=False` (`agent --prometheus URL --no-collect`): no collectors, no recorder,
        no findings pass and no write to the store; the dashboard is served from `cluster`
        (and from whatever the store already holds)."""
        self.cfg = cfg
        self.collect = collect
        if not collect and (collectors or cluster is None or not cluster.prometheus):
            raise ConfigError(
                "--no-collect serves the cluster from Prometheus only: give --prometheus URL "
                "(or prometheus.url) and no collectors"
            )
        self.collectors = list(collectors)
        self.clock = clock
        self.host, self.port = parse_listen(cfg.get("agent.listen"))
        token = cfg.get("agent.token") or None
        if token is None and not is_loopback(self.host):
            raise ConfigError(
                f"the agent would listen on {self.host}:{self.port}, beyond this machine, "
                "without a token: set agent.token (or GPULENS_AGENT_TOKEN), or listen on "
                "127.0.0.1"
            )
        if collect:
            session.ensure_writable(cfg.data_dir)  # fail now, in one line, not at every flush
        ctx = self.context = context_from_config(cfg)
        ctx.collecting = collect
        if cluster is None:
            from gpulens.app.cluster_feed import ClusterFeed

            cluster = ClusterFeed(cfg)  # the store's cluster, for the window a viewer asks
        self.cluster = ctx.cluster = cluster
        self.live = ctx.live = LiveState(
            state_window_s=cfg.get("agent.state_window_seconds"),
            keep_s=3 * cfg.get("agent.state_window_seconds"),  # what a refresh reads
            states=ctx.analysis["states"],
            prices=ctx.prices,
            region=ctx.region,
        )
        if collect:
            ctx.exposition = metrics(self.live, ctx)
        else:  # nothing measured here: no live state, an empty /metrics
            ctx.live = None
        self._web = web
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.speed = float(getattr(clock, "speed", 1.0))  # a PacedClock's pace, else 1
        ctx.store_max_age_s = self._wall(STORE_MAX_AGE_S, STORE_MIN_AGE_S)  # paced: sooner
        self._paced_from: tuple[float, int] | None = None  # (monotonic, clock ns) at start
        self._scheduler: Scheduler | None = None
        self._threads: list[threading.Thread] = []
        self._writer: SegmentWriter | None = None
        self._server: _Server | None = None
        self.failure: str | None = None  # why the recorder stopped, when it did

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    # -- the background work -------------------------------------------------------------------
    def _on_tick(self, tick: TickResult) -> None:
        self.live.on_tick(tick)
        if self._writer is not None:  # flush errors and the buffer show in /metrics at once
            self.live.set_store_stats(_fields(self._writer.stats()))
        if self._paced_from is not None and self._scheduler is not None:
            wall0, sim0 = self._paced_from  # a paced clock's time is exact: lag is on the wall
            due = wall0 + (tick.ts - sim0) / NS / self.speed
            self._scheduler.stats.last_lag_s = max(0.0, time.monotonic() - due)
        if self.live.refresh_due(tick.ts):
            try:
                self.live.refresh()
            except Exception as exc:  # a failing analysis never stops recording
                self._note(f"live state: {type(exc).__name__}: {exc}")
            if not self.context.viewer_recent():  # the next refresh is an interval away
                self.live.release()
            trim_heap()

    def _on_start(self, scheduler: Scheduler, writer: SegmentWriter) -> None:
        self.live.watch(scheduler.stats)
        self._writer = writer
        self._scheduler = scheduler
        if math.isfinite(self.speed) and self.speed != 1.0:
            self._paced_from = (time.monotonic(), self.clock.now_ns())

    def _wall(self, seconds: float, least_s: float = MIN_WALL_WAIT_S) -> float:
        """`seconds` of the agent's clock as a wall-clock wait (at least `least_s` when
        paced)."""
        if self.speed == 1.0:
            return seconds
        return max(least_s, seconds / self.speed) if math.isfinite(self.speed) else least_s

    def _record(self) -> None:
        try:
            session.record(
                self.cfg,
                self.collectors,
                self.clock,
                duration_s=None,
                on_tick=self._on_tick,
                stop=self.stop,
                maintenance=self.speed == 1.0,  # paced: `_maintenance_loop`, on the clock
                materialize=cache_for(self.cfg, self.stop),
                compact_large=compact_large_for(self.cfg, self.stop),
                on_start=self._on_start,
                warn=self._warn,
            )
        except Exception as exc:  # the agent cannot do its job: stop serving and say why
            self.failure = f"{type(exc).__name__}: {exc}"
            self._note(f"recorder stopped: {self.failure}")
            self.stop.set()
            if self._server is not None:
                self._server.should_exit = True

    def _findings_loop(self) -> None:
        every = float(self.cfg.get("agent.findings_every_seconds"))
        window = float(self.cfg.get("agent.findings_window_seconds"))
        wait = min(every, 5.0)  # the first pass soon after start, then every `every`
        last: float | None = None
        while not self.stop.wait(self._wall(wait, FINDINGS_MIN_WALL_S)):
            wait = min(every, 5.0)
            due = every if self.context.viewer_recent() else every * IDLE_FINDINGS_FACTOR
            if (
                last is not None
                and time.monotonic() - last < self._wall(due, FINDINGS_MIN_WALL_S) - 0.5
            ):
                continue  # a viewer can bring the next pass forward, none holds it back
            last = time.monotonic()
            now = self.clock.now_ns()
            if self._writer is not None:
                self.live.set_store_stats(_fields(self._writer.stats()))
            start = now - int(window * NS)
            try:
                if self.context.viewer_recent():  # the dashboard has the analysis loaded
                    findings = self.context.with_store(partial(self._findings, start, now))
                else:  # nobody looks: DuckDB and the analysis stay out of this process
                    findings = findings_in_child(self.cfg, start, now, self.stop)
            except Exception as exc:
                self._note(f"findings pass: {type(exc).__name__}: {exc}")
                continue
            self.live.set_findings(findings, now)
            del findings
            if not self.context.viewer_recent():
                self.context.close()  # the store's DuckDB connection, until the next pass
            trim_heap()

    def _maintenance_loop(self) -> None:
        """Compaction and retention on the agent's (paced) clock, as `record` runs them on the
        wall clock without --speed."""
        from gpulens.store.maintenance import maintain

        compact_after = float(self.cfg.get("store.compact_after_seconds"))
        every = max(60.0, compact_after / 2)
        while not self.stop.wait(self._wall(every)):
            try:
                maintain(
                    self.cfg.data_dir,
                    keep_days=self.cfg.get("store.retention_days"),
                    compact_min_age_seconds=compact_after,
                    clock=self.clock,
                    host=self.cfg.host,
                    materialize=cache_for(self.cfg, self.stop),
                    compact_large=compact_large_for(self.cfg, self.stop),
                )
            except Exception as exc:  # retried next time; recording goes on
                self._note(f"maintenance: {type(exc).__name__}: {exc}")
            finally:
                release_memory()

    def _cluster_loop(self) -> None:
        """The Cluster page's data from Prometheus, every `cluster.every_s` (a failed read is
        shown on the page and retried; it never stops the agent)."""
        assert self.cluster is not None
        self.cluster.run(self.stop, after=release_memory)

    def _findings(self, start_ns: int, end_ns: int, store: Store) -> list[Finding]:
        """The findings pass in this process (`store_child.findings_of`, as in the child)."""
        ctx = self.context
        return findings_of(
            store, start_ns, end_ns, ctx.prices, ctx.region, ctx.quotas, ctx.analysis
        )

    def _warn(self, message: str) -> None:
        """A store failure (or recovery): logged at once and kept for the dashboard."""
        session.log.warning(message)
        self._note(message)

    def _note(self, message: str) -> None:
        self.errors = [*self.errors[-19:], f"{time.strftime('%H:%M:%S')} {message}"]

    # -- running -------------------------------------------------------------------------------
    def start_background(self) -> None:
        """Start the recorder and the findings pass (the HTTP server is `serve`)."""
        work: list[tuple[Callable[[], None], str]] = []
        if self.collect:
            work += [(self._record, "gpulens-record"), (self._findings_loop, "gpulens-findings")]
        if self.collect and self.speed != 1.0:
            work.append((self._maintenance_loop, "gpulens-maintenance"))
        if self.cluster is not None and self.cluster.prometheus:
            work.append((self._cluster_loop, CLUSTER_THREAD))
        for target, name in work:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self, timeout_s: float = SHUTDOWN_S) -> bool:
        """Stop the background work within `timeout_s`: the recorder flushes its buffer, a
        findings pass still running is abandoned. False when the recorder did not finish in
        time (its last readings may not be stored). A Prometheus read of the Cluster page in
        flight is abandoned at once: it only reads, into its own temporary store."""
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        waited = [t for t in self._threads if t.name != CLUSTER_THREAD]
        for thread in waited:
            thread.join(max(0.0, deadline - time.monotonic()))
        recorded = not any(t.is_alive() and t.name == "gpulens-record" for t in waited)
        if not any(t.is_alive() for t in waited):
            self.context.close()  # a findings pass still running holds the store: leave it
        self.live.close()
        return recorded

    def serve(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Run until SIGTERM or SIGINT: background work plus the HTTP server on one port."""
        limit_malloc_arenas()
        app = self._web(self.context)
        sock = self._bind()
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,  # an open request does not hold up the shutdown
        )
        server = self._server = _Server(config, on_stop=self.stop.set)
        with _scratch(self.cluster is not None and self.cluster.prometheus):
            self.start_background()
            if on_ready is not None:
                ready = threading.Thread(
                    target=_announce, args=(server, self.url, on_ready), daemon=True
                )
                ready.start()
            previous = {sig: signal.signal(sig, server.stop_on) for sig in STOP_SIGNALS}
            try:
                server.run(sockets=[sock])
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                sock.close()
                since = server.stop_requested or time.monotonic()
                left = SHUTDOWN_S - EXIT_MARGIN_S - (time.monotonic() - since)
                recorded = self.shutdown(max(EXIT_MARGIN_S, left))
        if not recorded:
            raise CollectError(
                f"the recorder did not stop within {SHUTDOWN_S:g} s, so the readings buffered "
                f"since the last flush may not be stored in {str(self.cfg.data_dir)!r}; check "
                "that the data directory's disk answers"
            )
        if self.failure is not None:
            raise CollectError(
                f"the agent stopped because its recorder failed ({self.failure}); check the "
                f"data directory {str(self.cfg.data_dir)!r} and the collectors (gpulens doctor)"
            )

    def _bind(self) -> socket.socket:
        """The listening socket, or ConfigError naming the address when it cannot be had."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"the agent could not listen on {self.host}:{self.port}: {exc.strerror or exc} "
                "(in use by another process, or not an address of this machine): choose "
                "another with --listen HOST:PORT or agent.listen"
            ) from None
        sock.setblocking(False)
        return sock


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Server(uvicorn.Server):
    """uvicorn's server with our signal handling: the first SIGTERM or SIGINT stops it
    gracefully, a second one at once; the process then exits normally (uvicorn's own handlers
    re-raise the signal after shutdown, which would kill the process before the flush).
    `on_stop` is called at the first signal, so the recorder stops while the server does."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_stop = on_stop
        self.stop_requested: float | None = None  # time.monotonic() of the first signal
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def main_loop(self) -> None:
        """uvicorn's housekeeping loop (Date header, exit check), every `SERVER_TICK_S`."""
        wake = asyncio.Event()
        self._wake = (asyncio.get_running_loop(), wake)
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # uvicorn's tick count: the header every tick
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), SERVER_TICK_S)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop_on(self, signum: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self.force_exit = True
        if self.stop_requested is None:
            self.stop_requested = time.monotonic()
        self.should_exit = True
        if self._wake is not None:  # the main loop notices now, not at its next tick
            loop, wake = self._wake
            with contextlib.suppress(RuntimeError):  # the loop has closed already
                loop.call_soon_threadsafe(wake.set)
        self.on_stop()


@contextlib.contextmanager
def _scratch(own: bool) -> Iterator[None]:
    """With `own`, the process's temporary files in a directory of their own, removed at the
    end: a Cluster page read abandoned at shutdown leaves its temporary store there, not in
    the system's temporary directory."""
    if not own:
        yield
        return
    root = tempfile.mkdtemp(prefix="gpulens-agent-")
    previous, tempfile.tempdir = tempfile.tempdir, root
    try:
        yield
    finally:
        tempfile.tempdir = previous
        # moved out of the way first: a read still writing there (abandoned, not waited for)
        # then fails to find its store, which the writers never make again (ensure_dir's
        # `within`), instead of adding files while the tree is removed
        gone = Path(f"{root}.gone")
        try:
            Path(root).rename(gone)
        except OSError:
            gone = Path(root)
        shutil.rmtree(gone, ignore_errors=True)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for the threads started from now on (unless MALLOC_ARENA_MAX
    says otherwise); False where that is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))


def _fields(stats: WriterStats) -> dict[str, float]:
    return {k: float(v) for k, v in asdict(stats).items()}


def _announce(server: Any, url: str, on_ready: Callable[[str], None]) -> None:
    for _ in range(600):
        if server.started:
            on_ready(url)
            return
        if server.should_exit:
            return
        time.sleep(0.05)
