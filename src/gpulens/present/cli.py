"""The `gpulens` command: demo, record, query, doctor.

Errors are one line on stderr and an exit code (the GpulensError's `exit_code`); `--debug`
shows the traceback instead.
"""

from __future__ import annotations

import csv
import io
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gpulens import __version__
from gpulens.clock import PacedClock, SystemClock
from gpulens.config import Config, load_config
from gpulens.errors import ConfigError, GpulensError
from gpulens.present import format as human
from gpulens.present import trace_cli
from gpulens.present.console import app, err, out, write_out
from gpulens.present.lazy import lazy_module

if TYPE_CHECKING:  # imported when a command first uses them: each command starts fast
    import pyarrow as pa

    from gpulens.app import session, store_child
    from gpulens.collect.simulated import SimulatedFleet
    from gpulens.pipeline.scheduler import TickResult
    from gpulens.present import views
else:
    session = lazy_module("gpulens.app.session")
    store_child = lazy_module("gpulens.app.store_child")
    views = lazy_module("gpulens.present.views")

_state = {"debug": False}

DEMO_DATA_DIR = Path("demo-data")


def _version(value: bool) -> None:
    if value:
        out.print(f"gpulens {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    _state["debug"] = debug


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _time(ts: int) -> str:
    return datetime.fromtimestamp(ts / 1e9, UTC).strftime("%H:%M:%S")


def _render_line(line: views.TickLine) -> Text:
    return Text.assemble(
        (_time(line.ts), "bold"),
        f" {line.gpus} GPUs duty {_pct(line.duty):>4} SM {_pct(line.sm_active):>4} ",
        f"tensor {_pct(line.tensor_active):>4} {line.power_watts / 1000:5.1f} kW ",
        f"{line.memory_used_bytes / 1e9:4.0f} GB {line.processes} procs",
    )


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM, so a recording ends cleanly with its buffer flushed."""
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: object) -> None:
        stop.set()

    for s in previous:
        signal.signal(s, handler)
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _live_ticks(live: Live, every: int) -> Callable[[TickResult], None]:
    """Updates the live line at most ten times a second; prints every `every`-th tick."""
    state = {"n": 0, "shown": 0.0}

    def on_tick(tick: TickResult) -> None:
        state["n"] += 1
        now = time.monotonic()
        if now - state["shown"] < 0.1 and state["n"] % every:
            return
        state["shown"] = now
        line = _render_line(views.tick_line(tick.ts, tick.readings))
        live.update(line, refresh=True)
        if state["n"] % every == 0:
            live.console.print(line)

    return on_tick


def _summary_table(cfg: Config) -> Table:
    store = session.open_store(cfg.data_dir)
    try:
        rows = views.fleet_summary(store)
    finally:
        store.close()
    table = Table(
        title="Per GPU: duty cycle versus useful work",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
    )
    for name in ("host", "GPU", "job", "engine", "duty", "SM", "tensor", "DRAM", "GB", "kWh"):
        left = name in ("host", "job", "engine")
        table.add_column(name, justify="left" if left else "right", no_wrap=True)
    host = None
    for r in rows:
        first = r["host"] != host
        host = r["host"]
        table.add_row(
            str(host) if first else "",
            str(r["gpu_index"]),
            r.get("jobs") or "-",
            r.get("engines") or "-",
            _pct(r["duty"]),
            _pct(r["sm_active"]),
            _pct(r["tensor_active"]),
            _pct(r["dram_active"]),
            "-" if r["memory_peak_bytes"] is None else f"{r['memory_peak_bytes'] / 1e9:.1f}",
            human.number(r["energy_kwh"]),
        )
    return table


def _print_findings(cfg: Config, limit: int = 10) -> None:
    """The run's findings, one line each, largest impact first."""
    from gpulens.app.analysis import report

    view = report(cfg)
    t = view.totals
    out.print(
        f"\nAllocated {human.number(t.get('allocated_gpu_hours', 0))} GPU-hours, useful "
        f"{human.number(t.get('useful_gpu_hours', 0))}, wasted "
        f"{human.number(t.get('wasted_gpu_hours', 0))} "
        f"({human.money(t.get('wasted_cost', 0), t.get('currency', 'USD'))}), headroom "
        f"{human.number(t.get('headroom_gpu_hours', 0))} in healthy work "
        "(already efficient: kernel-level tuning). "
        f"Findings ({len(view.findings)}):"
    )
    for f in view.findings[:limit]:
        who = f.subject.get("job_id") or f.subject.get("gpu_uuid", "")
        out.print(
            f"  [{f.severity.value}] {f.rule_id} {who}: {human.readable(f.summary)} "
            f"({human.number(f.impact.wasted_gpu_hours)} GPU-h)",
            highlight=False,
            markup=False,
        )


def _generate_fast(cfg: Config, start: int, duration: float, interval: float) -> None:
    """All cores, a progress bar, no live line."""
    from gpulens.app.generate import generate

    total = math.ceil(duration / interval)
    with Progress(
        TextColumn("generating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ticks"),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    ) as bar:
        task = bar.add_task("ticks", total=total)
        result = generate(
            cfg, start, start + int(duration * 1e9), on_progress=lambda n: bar.advance(task, n)
        )
    out.print(
        f"{result.ticks} ticks, {human.number(result.readings)} readings, "
        f"{result.segments_written} segments ({human.size(result.bytes_written)})"
    )


def _run_paced(
    cfg: Config, fleet: SimulatedFleet, start: int, duration: float, speed: float, interval: float
) -> None:
    """Simulated time at `speed` × wall time, one live line per tick."""
    clock = PacedClock(start_ns=start, speed=speed)
    collectors = session.fleet_collectors(fleet, clock)
    ticks_per_print = max(1, round(speed * 0.5 / interval))
    with _stop_on_signals() as stop, Live(console=out, transient=True, auto_refresh=False) as live:
        result = session.record(
            cfg,
            collectors,
            clock,
            duration_s=duration,
            on_tick=_live_ticks(live, ticks_per_print),
            stop=stop,
            inline=True,
        )
    out.print(
        f"{result.ticks} ticks, {human.number(result.readings)} readings, "
        f"{result.store.segments_written} segments ({human.size(result.store.bytes_written)})"
    )


@app.command()
def demo(
    duration: Annotated[float, typer.Option(help="Simulated seconds to run.", min=1)] = 3600.0,
    speed: Annotated[
        float,
        typer.Option(help="Simulated seconds per wall-clock second (0: as fast as possible)."),
    ] = 1000.0,
    data_dir: Annotated[
        str, typer.Option(help="Where to store the readings (a directory or s3://bucket/prefix).")
    ] = str(DEMO_DATA_DIR),
    scenario: Annotated[
        list[str] | None, typer.Option(help="Scenario to run (repeatable; default: all).")
    ] = None,
    hosts: Annotated[
        int | None, typer.Option(help="Simulated hosts (default 3: all nine scenarios fit).")
    ] = None,
    gpus_per_host: Annotated[int | None, typer.Option(help="Simulated GPUs per host [4].")] = None,
    seed: Annotated[int | None, typer.Option(help="Same seed, same fleet [0].")] = None,
    interval: Annotated[float, typer.Option(help="Seconds between ticks.")] = 1.0,
    serve: Annotated[
        bool,
        typer.Option(help="Then run the agent on the fleet (dashboard and /metrics) until Ctrl-C."),
    ] = True,
    listen: Annotated[
        str | None, typer.Option(help="HOST:PORT the agent serves on [127.0.0.1:9477].")
    ] = None,
    show_token: Annotated[
        bool, typer.Option(help="Print the dashboard's link with its token (agent.token).")
    ] = False,
) -> None:
    """Run the simulated GPU fleet into a data directory, summarise it, then serve it live."""
    if speed < 0:
        raise GpulensError(f"--speed {speed:g} is negative: use a positive factor, or 0 for max")
    cfg = load_config(
        overrides={
            "data_dir": str(data_dir),
            "host": "demo",
            "store.flush_seconds": 300.0,
            "collect.collectors": ["simulated"],
            "collect.interval_seconds": interval,
            "simulated.hosts": hosts,
            "simulated.gpus_per_host": gpus_per_host,
            "simulated.seed": seed,
            "simulated.scenarios": list(scenario or []),
            "agent.listen": listen,
        }
    )
    start = SystemClock().now_ns() - int(duration * 1e9)
    start -= start % 1_000_000_000
    fleet = session.simulated_fleet(cfg, start)
    out.print(
        f"Simulating {len(fleet.hosts)} hosts × {cfg.get('simulated.gpus_per_host')} GPUs for "
        f"{duration:g} s ({'as fast as possible' if speed == 0 else f'{speed:g}× real time'}) "
        f"into {cfg.data_dir}"
    )
    if speed == 0:
        _generate_fast(cfg, start, duration, interval)
    else:
        _run_paced(cfg, fleet, start, duration, speed, interval)
    session.tidy_store(cfg, compact_min_age_seconds=0)  # merge the run into daily files
    out.print(_summary_table(cfg))
    (cfg.data_dir / "ground_truth.json").write_text(
        json.dumps(fleet.ground_truth(), indent=2), encoding="utf-8"
    )
    _print_findings(cfg)
    out.print(f"Ground truth of the scenarios: {cfg.data_dir / 'ground_truth.json'}")
    out.print(f"Full report: gpulens report --data-dir {cfg.data_dir} [--format html -o r.html]")
    out.print(f'Query it: gpulens query --data-dir {cfg.data_dir} "SELECT * FROM gpu LIMIT 5"')
    if serve:
        from gpulens.present.cli_live import serve_demo

        serve_demo(cfg, fleet, show_token)


@app.command()
def record(
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    data_dir: Annotated[
        str | None,
        typer.Option(help="Where to store the readings (a directory or s3://bucket/prefix)."),
    ] = None,
    duration: Annotated[
        float | None, typer.Option(help="Seconds to record (default: until interrupted).")
    ] = None,
    interval: Annotated[float | None, typer.Option(help="Seconds between ticks.")] = None,
) -> None:
    """Run the configured collectors and write their readings to the store."""
    cfg = load_config(
        config,
        overrides={
            "data_dir": str(data_dir) if data_dir else None,
            "collect.interval_seconds": interval,
        },
    )
    clock = SystemClock()
    collectors = session.build_collectors(cfg, clock)
    names = ", ".join(c.name for c in collectors)
    err.print(
        f"Recording {names} every {cfg.get('collect.interval_seconds'):g} s into "
        f"{cfg.data_dir} (Ctrl-C to stop)"
    )
    with _stop_on_signals() as stop, Live(console=err, transient=True, auto_refresh=False) as live:
        result = session.record(
            cfg,
            collectors,
            clock,
            duration_s=duration,
            on_tick=_live_ticks(live, 10**9),
            stop=stop,
            maintenance=True,
            materialize=store_child.cache_for(cfg, stop),
            compact_large=store_child.compact_large_for(cfg, stop),
        )
    errors = sum(result.collector_errors.values())
    err.print(
        f"{result.ticks} ticks, {human.number(result.readings)} readings, {errors} collector errors"
    )


def _cell(value: object) -> str:
    """A query result cell for the table format: floats to 6 significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _times_as_text(result: pa.Table) -> pa.Table:
    """`result` with its timestamps, times and durations as text, every digit kept: ISO 8601
    (`2026-11-29T14:00:00.123456789Z`, UTC for a zoned column) and `1500 ns`. Python's
    datetime and timedelta hold microseconds, so converting them would fail or round."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in result.columns:
        kind = column.type
        if pa.types.is_timestamp(kind):
            if kind.tz is not None:
                column = column.cast(pa.timestamp(kind.unit, tz="UTC"))
            column = pc.strftime(column, "%Y-%m-%dT%H:%M:%S" + ("Z" if kind.tz else ""))
        elif pa.types.is_duration(kind):
            column = pc.binary_join_element_wise(column.cast(pa.string()), f" {kind.unit}", "")
        elif _has_times(kind):  # times, and times nested in lists or structs: Arrow's text
            column = column.cast(_texted(kind))
        columns.append(column)
    return pa.table(columns, names=result.column_names)


def _has_times(kind: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_timestamp(kind) or pa.types.is_time(kind) or pa.types.is_duration(kind):
        return True
    return any(_has_times(kind.field(i).type) for i in range(kind.num_fields))


def _texted(kind: pa.DataType) -> pa.DataType:
    """`kind` with every timestamp, time and duration inside it made a string."""
    import pyarrow as pa

    if not _has_times(kind):
        return kind
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_texted(f.type)) for f in kind])
    if pa.types.is_large_list(kind):
        return pa.large_list(_texted(kind.value_type))
    if pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind):
        return pa.list_(_texted(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(_texted(kind.key_type), _texted(kind.item_type))
    return pa.string()


class CaptureFormat(StrEnum):
    dcgm_exporter = "dcgm-exporter"
    nvidia_smi_xml = "nvidia-smi-xml"
    nvidia_smi_csv = "nvidia-smi-csv"
    csv = "csv"


@app.command()
def ingest(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Captured files to store.", show_default=False)
    ] = None,
    format: Annotated[
        CaptureFormat | None,
        typer.Option(help="Format of the files (default: detected from the content)."),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Host name for readings that carry none.")
    ] = None,
    time: Annotated[
        str | None,
        typer.Option(
            help="Timestamp of captures that carry no time of their own (or of the first "
            "quantile-curve sample), ISO 8601 (default: each file's mtime)."
        ),
    ] = None,
    tz: Annotated[
        str | None,
        typer.Option(
            help="Time zone of the times nvidia-smi prints (local, without a zone), an IANA "
            "name such as Europe/Berlin (default: the ingest.timezone setting, UTC)."
        ),
    ] = None,
    data_dir: Annotated[
        str | None, typer.Option(help="The store to write to (a directory or s3://bucket/prefix).")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="CSV preset (alibaba-genai-2026, acme-nsdi24); implies --format csv."),
    ] = None,
    time_column: Annotated[str | None, typer.Option(help="CSV: the timestamp column.")] = None,
    time_unit: Annotated[
        str, typer.Option(help="CSV: timestamp unit: auto, s, ms, us, ns or iso.")
    ] = "auto",
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", help="CSV: COLUMN=FIELD[:UNIT], a metric column (repeatable)."),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="CSV: COLUMN=LABEL, an identity column (repeatable).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="CSV: LABEL=VALUE put on every row (repeatable)."),
    ] = None,
    delimiter: Annotated[str, typer.Option(help="CSV: field delimiter.")] = ",",
    prometheus: Annotated[
        str | None,
        typer.Option(help="Copy a range from this Prometheus (Thanos, Mimir) URL instead."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="--prometheus: start, ISO 8601 or a duration back (7d).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="--prometheus: end (default now).")] = None,
    step: Annotated[
        float | None, typer.Option(help="--prometheus: seconds per stored reading (60).")
    ] = None,
) -> None:
    """Store captured files as readings: dcgm-exporter pages, nvidia-smi XML or CSV, or any
    CSV export of telemetry (with --map, or a --preset); or a range of a Prometheus."""
    from gpulens.app.ingest import ingest as run_ingest
    from gpulens.collect.csv_import import column_map_from_options

    if prometheus is None and not files:
        raise typer.BadParameter(  # a usage error: the usage line, exit 2
            "Missing argument: the files to store, or --prometheus URL", param_hint="'FILES...'"
        )
    cfg = load_config(config, overrides={"data_dir": str(data_dir) if data_dir else None})
    if prometheus is not None:
        _ingest_prometheus(cfg, prometheus, since, until, step, bool(files))
        return
    assert files  # without --prometheus, files were required above
    ts_ns = None
    if time is not None:
        try:
            moment = datetime.fromisoformat(time)
        except ValueError:
            raise ConfigError(
                f"--time {time!r} is not an ISO 8601 time: use e.g. 2026-11-29T14:00:00Z"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ts_ns = int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    column_map = None
    if map_ or time_column:
        column_map = column_map_from_options(
            time_column or "", map_ or [], label or [], set_ or [], time_unit, delimiter
        )
    fmt = format.value if format else ("csv" if column_map or preset else None)
    result = run_ingest(
        cfg, files, fmt, host or cfg.host, ts_ns, column_map=column_map, preset=preset, tz=tz
    )
    skipped = sum(result.skipped.values())
    out.print(
        f"stored {human.number(result.readings)} readings from {result.files} file(s) "
        f"into {cfg.data_dir}"
        + (f" ({skipped} series skipped: {dict(result.skipped)})" if skipped else "")
    )


def _ingest_prometheus(
    cfg: Config, url: str, since: str | None, until: str | None, step: float | None, files: bool
) -> None:
    from gpulens.app.prometheus import ingest as ingest_prometheus
    from gpulens.present.timespec import parse_when

    if files:
        raise ConfigError("--prometheus copies a range: give it without files")
    now = SystemClock().now_ns()
    got = ingest_prometheus(
        cfg, url, parse_when(since, now, "--since"), parse_when(until, now, "--until"), now, step
    )
    out.print(
        f"stored {human.number(got.rows)} readings ({human.number(got.points)} points, "
        f"{got.chunks} day(s)) from {got.source} into {cfg.data_dir}"
    )
    for note in got.notes:
        err.print(f"note: {note}")


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over the tables gpu, process, host, app, event.")],
    data_dir: Annotated[
        str | None, typer.Option(help="The store to query (a directory or s3://bucket/prefix).")
    ] = None,
    format: Annotated[Format, typer.Option(help="Output format.")] = Format.table,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Run SQL over the store and print the result."""
    cfg = load_config(config, overrides={"data_dir": str(data_dir) if data_dir else None})
    store = session.open_store(cfg.data_dir)
    try:
        result = store.query(sql)
    finally:
        store.close()
    result = _times_as_text(result)
    rows: list[dict[str, Any]] = result.to_pylist()
    if format is Format.json:
        sys.stdout.write(json.dumps(rows, default=str) + "\n")
    elif format is Format.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=result.column_names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        sys.stdout.write(buffer.getvalue())
    else:
        table = Table()
        for name in result.column_names:
            table.add_column(name)
        for row in rows:
            table.add_row(*(_cell(v) for v in row.values()))
        out.print(table)


class ReportFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    html = "html"
    json = "json"


@app.command()
def report(
    data_dir: Annotated[
        str | None, typer.Option(help="The store to report on (a directory or s3://bucket/prefix).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Start: ISO 8601 time, or a duration back from now (7d).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="End: ISO 8601 time or duration.")] = None,
    job: Annotated[str | None, typer.Option(help="Report on one job (a job report).")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user.")] = None,
    host: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    engine: Annotated[str | None, typer.Option(help="Only this engine.")] = None,
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    format: Annotated[ReportFormat, typer.Option(help="Output format.")] = ReportFormat.terminal,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file.")
    ] = None,
    step: Annotated[
        float | None, typer.Option(help="Interval seconds (default: chosen from the span).")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(help="Report on this Prometheus (Thanos, Mimir) URL instead of a store."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(help="Break down by node, namespace, team, queue, partition, job, user."),
    ] = None,
    node_queue: Annotated[
        list[str] | None, typer.Option(help="--by queue: queues of hosts, NODE=QUEUE,...")
    ] = None,
    sacct: Annotated[
        Path | None,
        typer.Option(help="--job with --prometheus: the job's record, sacct/squeue --json output."),
    ] = None,
    k8s: Annotated[
        Path | None,
        typer.Option(help="--job with --prometheus: the pod (ns/pod), kubectl -o json or yaml."),
    ] = None,
    job_lookup: Annotated[
        str | None,
        typer.Option(help="--job with --prometheus: command printing the record ({job} = ID)."),
    ] = None,
    plans: Annotated[
        bool, typer.Option(help="Add the off-peak and consolidation plans (docs/plans.md).")
    ] = False,
    forecast: Annotated[
        str | None, typer.Option(help="Add a capacity forecast this far ahead, hourly: 7d, 48h.")
    ] = None,
    batch_queue: Annotated[
        list[str] | None, typer.Option(help="--plans: a queue whose work can wait for quiet hours.")
    ] = None,
) -> None:
    """A job report (--job) or a fleet report: useful work, waste and its price, findings."""
    from gpulens.app.analysis import report as run_report
    from gpulens.present.cli_fleet import parse_capacity_like
    from gpulens.present.reports.fleet import RENDERERS
    from gpulens.present.timespec import parse_when

    cfg = load_config(config, overrides={"data_dir": str(data_dir) if data_dir else None})
    now = SystemClock().now_ns()
    start_ns = parse_when(since, now, "--since")
    end_ns = parse_when(until, now, "--until")
    given = {"job_id": job, "user": user, "host": host, "engine": engine, "project": project}
    scope = {k: v for k, v in given.items() if v}
    queues = parse_capacity_like(node_queue or [], "--node-queue", "NODE=QUEUE")
    record = None
    if prometheus is not None and job:  # the job's range and GPUs from its scheduler
        from gpulens.app import job_range

        record = job_range.lookup(job, sacct, k8s, job_lookup)
    elif sacct is not None or k8s is not None or job_lookup is not None:
        raise ConfigError("--sacct, --k8s and --job-lookup go with --job ID --prometheus URL")
    request = None  # the fleet plans (docs/plans.md): app/fleet_plans.py, present/reports/plans.py
    if plans or forecast is not None or batch_queue:
        from gpulens.app.fleet_plans import plan_request, report_plans

        if job:
            raise ConfigError("--plans, --forecast and --batch-queue are for a fleet report")
        request = plan_request(forecast, plans, batch_queue or [])
    fleet_plans = None
    if record is not None:
        view = job_range.report(cfg, prometheus, record, now, step)
    elif prometheus is not None:
        from gpulens.app.fleet_plans import report_with_plans

        view, fleet_plans = report_with_plans(
            cfg, prometheus, start_ns, end_ns, now, scope, step, by, queues, request
        )
    else:
        view = run_report(cfg, start_ns, end_ns, scope, step, by=by, node_queues=queues)
        if request is not None:
            fleet_plans = report_plans(cfg, request, queues, start_ns, end_ns)
    text = RENDERERS[format.value](view)
    if fleet_plans is not None:
        from gpulens.present.reports.plans import with_report_plans

        text = with_report_plans(text, format.value, fleet_plans)
    write_out(text, output)


@app.command(
    name=trace_cli.NAME,
    help=trace_cli.HELP,
    add_help_option=False,
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "allow_interspersed_args": False,
    },
)
def trace(ctx: typer.Context) -> None:
    """The arguments, help and errors are present/trace_cli.py's: one declaration, whether the
    command comes through here or straight from the entry point (present/entry.py)."""
    trace_cli.execute(ctx.args)


@app.command()
def doctor(
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Say, for every source, whether it works here and what would make it work."""
    from gpulens.collect.probe import probe_all

    cfg = load_config(config)
    table = Table(title="gpulens sources on this machine", title_justify="left")
    table.add_column("source")
    table.add_column("works")
    table.add_column("detail")
    table.add_column("to make it work")
    for status in probe_all(
        cfg.get("dcgm.urls"),
        cfg.get("nvidia_smi.binary"),
        dcgm_timeout_s=cfg.get("dcgm.timeout_seconds"),
        max_page_bytes=cfg.get("dcgm.max_page_bytes"),
    ):
        table.add_row(
            status.name,
            "[green]yes[/green]" if status.works else "[red]no[/red]",
            status.detail,
            status.fix,
        )
    out.print(table)


def main() -> None:
    """The Typer app's entry point (present/entry.py sends every command but `trace` here).

    Click's standalone mode handles its own errors whatever copy of click the installed typer
    carries: a usage error prints the usage line, the nearest command or option, and exits 2;
    `--help` and `--version` exit 0; Ctrl-C exits 130. Our errors are one line and the
    GpulensError's exit code; anything else is an internal error (70)."""
    try:
        app()
    except GpulensError as exc:
        if _state["debug"]:
            raise
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if _state["debug"]:
            raise
        err.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {escape(str(exc))} "
            "(rerun with --debug)"
        )
        sys.exit(70)


# register the commands of these modules: alerts, digest, enforce, fleet; agent, top, rules;
# profile
from gpulens.present import (  # noqa: E402
    cli_alerts,  # noqa: F401
    cli_digest,  # noqa: F401
    cli_enforce,  # noqa: F401
    cli_fleet,  # noqa: F401
    cli_live,  # noqa: F401
    cli_profile,  # noqa: F401
)
