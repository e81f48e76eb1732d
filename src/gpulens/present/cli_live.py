"""The long-running commands: `gpulens agent`, `gpulens top`, `gpulens rules`, and the live part
of `gpulens demo`. Registered on the `gpulens` command (present/console.py) when present/cli.py
imports this module."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.clock import Clock, PacedClock, SystemClock
from gpulens.config import Config, load_config
from gpulens.errors import ConfigError
from gpulens.present.console import app, err, out
from gpulens.present.lazy import lazy_module

if TYPE_CHECKING:
    from gpulens.app import session
    from gpulens.app.cluster_feed import ClusterFeed
    from gpulens.collect.simulated import SimulatedFleet
else:
    session = lazy_module("gpulens.app.session")


SHOW_TOKEN_HELP = "Print the dashboard's link with its token (a secret) when it is ready."


def _announce(url: str, token: str | None, show_token: bool) -> None:
    """The ready line: the token only when asked for, as logs keep what is printed."""
    link, hint = url, ""
    if token is not None and show_token:
        link = f"{url}?token={token}"
    elif token is not None:
        hint = " (token required: open the dashboard once with ?token=TOKEN, or --show-token)"
    out.print(
        f"gpulens agent: dashboard {link}  metrics {url}metrics  (Ctrl-C to stop){hint}",
        highlight=False,
        soft_wrap=True,
    )


def serve_agent(
    cfg: Config,
    collectors: list,  # type: ignore[type-arg]
    show_token: bool = False,
    clock: Clock | None = None,
    *,
    collect: bool = True,
    cluster: ClusterFeed | None = None,
) -> None:
    """Run the agent over `collectors` until SIGTERM or SIGINT.

    This is where the running process is composed: the agent (app/) records and judges, and is
    handed the dashboard's web app and the /metrics exporter (present/) to serve."""
    from gpulens.app.agent import Agent
    from gpulens.present.prometheus.exporter import metrics_source
    from gpulens.present.web.front import lazy_app
    from gpulens.present.web.security import check_token

    check_token(cfg.get("agent.token"))  # before anything starts
    agent = Agent(
        cfg,
        collectors,
        clock or SystemClock(),
        web=lazy_app,
        metrics=metrics_source(cfg),
        collect=collect,
        cluster=cluster,
    )
    agent.serve(on_ready=lambda url: _announce(url, cfg.get("agent.token"), show_token))
    err.print("gpulens agent stopped" + ("; buffered readings flushed" if collect else ""))


def serve_demo(cfg: Config, fleet: SimulatedFleet, show_token: bool = False) -> None:
    """The agent on the demo's simulated fleet, continuing in real time from now."""
    live_cfg = replace(cfg, values={**cfg.values, "store.flush_seconds": 10.0})
    serve_agent(live_cfg, session.fleet_collectors(fleet, SystemClock()), show_token)


@app.command()
def agent(
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    listen: Annotated[
        str | None, typer.Option(help="HOST:PORT to serve on [127.0.0.1:9477].")
    ] = None,
    data_dir: Annotated[
        str | None,
        typer.Option(help="Where to store the readings (a directory or s3://bucket/prefix)."),
    ] = None,
    show_token: Annotated[bool, typer.Option(help=SHOW_TOKEN_HELP)] = False,
    speed: Annotated[
        float | None,
        typer.Option(
            help="Simulated seconds per wall-clock second, for the simulated collector only "
            "(soak tests: a simulated day in minutes).",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            help="Serve the Cluster page from this Prometheus (or Thanos, Mimir) URL, read "
            "again every --cluster-every seconds (prometheus.* settings for auth and TLS)."
        ),
    ] = None,
    no_collect: Annotated[
        bool,
        typer.Option(
            "--no-collect",
            help="Collect nothing here and write no store: only serve the cluster from "
            "--prometheus.",
        ),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(help="Cluster window start: a duration back from now (7d) or ISO 8601."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Cluster window end (ISO 8601; default: now).")
    ] = None,
    cluster_every: Annotated[
        float, typer.Option(help="Seconds between reads of --prometheus (30 to 21600).")
    ] = 300.0,
    node_queue: Annotated[
        list[str] | None,
        typer.Option(
            help="Cluster page: the queue of nodes whose readings name none: NODE=QUEUE,..."
        ),
    ] = None,
) -> None:
    """Record, export /metrics and serve the dashboard and API, on one port."""
    cfg = load_config(
        config,
        overrides={"data_dir": str(data_dir) if data_dir else None, "agent.listen": listen},
    )
    from gpulens.present.cli_fleet import parse_capacity_like

    queues = parse_capacity_like(node_queue or [], "--node-queue", "NODE=QUEUE")
    cluster = cluster_feed(cfg, prometheus, since, until, cluster_every, no_collect, queues)
    if no_collect:
        assert cluster is not None and cluster.url is not None
        if speed is not None:
            raise ConfigError("--speed paces collectors: --no-collect has none")
        err.print(
            f"gpulens agent: no collection; the cluster from {cluster.public_url} every "
            f"{cluster.every_s:g} s"
        )
        serve_agent(cfg, [], show_token, collect=False, cluster=cluster)
        return
    clock: Clock = SystemClock()
    if speed is not None:
        clock = PacedClock(paced_start(clock.now_ns()), speed=check_speed(speed, cfg))
    collectors = session.build_collectors(cfg, clock)
    names = ", ".join(c.name for c in collectors)
    pace = f" at {speed:g}× real time" if speed is not None else ""
    err.print(f"gpulens agent: recording {names} into {cfg.data_dir}{pace}")
    serve_agent(cfg, collectors, show_token, clock, cluster=cluster)


def cluster_feed(
    cfg: Config,
    url: str | None,
    since: str | None,
    until: str | None,
    every_s: float,
    no_collect: bool,
    node_queues: dict[str, str] | None = None,
) -> ClusterFeed | None:
    """The Cluster page's feed of `agent --prometheus URL` (None without a Prometheus: the
    agent serves its store's cluster). A duration `--since` slides with the clock; ISO times
    stay fixed."""
    import time

    from gpulens.app.cluster_feed import DEFAULT_SPAN_S, ClusterFeed
    from gpulens.present.timespec import parse_when

    if url is None and no_collect:  # a recording agent reads Prometheus only when told to
        url = cfg.get("prometheus.url") or None
    if url is None:
        if no_collect:
            raise ConfigError(
                "--no-collect serves the cluster from a Prometheus: give --prometheus URL "
                "(or set prometheus.url)"
            )
        if since is not None or until is not None:
            raise ConfigError("--since and --until set the window read from --prometheus")
        from gpulens.app.cluster_feed import ClusterFeed

        return ClusterFeed(cfg, node_queues=node_queues) if node_queues else None
    now = time.time_ns()
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until")
    sliding = since is not None and start != parse_when(since, now + 10**9, "--since")
    if start is not None and end is not None and start >= end:
        raise ConfigError(f"--since {since!r} must be before --until {until!r}")
    span = DEFAULT_SPAN_S if start is None or not sliding else (now - start) / 1e9
    return ClusterFeed(
        cfg,
        str(url),
        start_ns=None if sliding else start,
        end_ns=end,
        span_s=span,
        every_s=every_s,
        node_queues=node_queues,
    )


def check_speed(speed: float, cfg: Config) -> float:
    """`--speed` when every collector is simulated (real sources answer for real time only);
    ConfigError otherwise."""
    names = list(cfg.get("collect.collectors"))
    real = [n for n in names if n != "simulated"]
    if real:
        raise ConfigError(
            f"--speed {speed:g} needs simulated collectors only, but collect.collectors = "
            f"{names!r} has {', '.join(map(repr, real))}, which answer in real time: drop "
            '--speed, or set collectors = ["simulated"]'
        )
    if not speed > 0 or speed != speed or speed == float("inf"):
        raise ConfigError(f"--speed {speed:g} is not a positive finite factor: use e.g. 60")
    return speed


def paced_start(now_ns: int) -> int:
    """Where a paced agent's clock starts: now, on a whole second."""
    return now_ns - now_ns % 1_000_000_000


@app.command()
def top(
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    simulated: Annotated[
        bool, typer.Option(help="Watch the simulated fleet instead of this machine's GPUs.")
    ] = False,
    interval: Annotated[float | None, typer.Option(help="Seconds between refreshes.")] = None,
) -> None:
    """Live terminal view: duty cycle, SM and tensor activity, memory, power and state per GPU,
    and the processes on them."""
    from gpulens.present.top.app import run_top

    overrides: dict[str, object] = {"collect.interval_seconds": interval}
    if simulated:
        overrides["collect.collectors"] = ["simulated"]
    cfg = load_config(config, overrides=overrides)
    run_top(cfg)


@app.command()
def rules(
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory to write the files to.")
    ] = Path(),
    idle_for: Annotated[
        str | None,
        typer.Option(
            help="Alert when a GPU is idle but allocated this long (PromQL duration; default: "
            "the idle finding's warning level, findings.idle_allocated.warn_minutes, 60 min)."
        ),
    ] = None,
    dcgm: Annotated[
        bool, typer.Option(help="Rules for a Prometheus that only scrapes dcgm-exporter.")
    ] = False,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Write Prometheus recording and alerting rules and the Grafana dashboard JSON."""
    from gpulens.present.prometheus.rules import promql_duration, write_rules

    if idle_for is None:
        idle_for = promql_duration(session.idle_ladder_s(load_config(config))[1])
    for path in write_rules(output, idle_for=idle_for, dcgm=dcgm):
        out.print(f"wrote {path}")
