"""`gpulens fleet`: the cluster summary of scheduler sources (registered on the app by cli.py).

Sources: cluster sequence CSVs (--sequence), job logs (--jobs), Slurm JSON (--slurm, or
--slurm-run to run squeue/sacct/sinfo here) and Kubernetes dumps (--k8s). The work is
app/fleet.py's; the output is present/reports/cluster.py's.
"""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpulens.present.console import app, write_out


def parse_capacity_like(specs: list[str], option: str, shape: str) -> dict[str, str]:
    """``KEY=VALUE`` pairs, comma-separated or repeated (ConfigError names the bad one)."""
    from gpulens.errors import ConfigError

    out: dict[str, str] = {}
    for spec in specs:
        for pair in (p.strip() for p in spec.split(",") if p.strip()):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ConfigError(f"{option} {pair!r}: expected {shape}")
            out[key.strip()] = value.strip()
    return out


class FleetFormat(StrEnum):
    terminal = "terminal"
    markdown = "markdown"
    html = "html"
    json = "json"


@app.command()
def fleet(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="More files of the one source kind given (so a shell glob works: "
            "--sequence vc/*/seq.csv).",
            show_default=False,
        ),
    ] = None,
    sequence: Annotated[
        list[Path] | None,
        typer.Option(help="Cluster sequence CSV (per step: total, in use, pending GPUs)."),
    ] = None,
    jobs: Annotated[
        list[Path] | None,
        typer.Option(help="Job log CSV (submit, start, end, GPUs, queue, user per job)."),
    ] = None,
    slurm: Annotated[
        list[Path] | None,
        typer.Option(help="Slurm JSON: squeue --json, sacct --json or sinfo --json output."),
    ] = None,
    slurm_run: Annotated[
        list[str] | None,
        typer.Option(help="Run squeue, sacct or sinfo --json here and read its output."),
    ] = None,
    k8s: Annotated[
        list[Path] | None,
        typer.Option(help="Kubernetes pods (and nodes): kubectl get ... -o json or -o yaml."),
    ] = None,
    kubectl: Annotated[
        bool,
        typer.Option(help="Run kubectl get pods,nodes -A -o json here (its current context)."),
    ] = False,
    data_dir: Annotated[
        str | None,
        typer.Option(
            help="Also read this store (a directory or s3://bucket/prefix): allocation, duty "
            "cycle, useful work per queue."
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Store window start: ISO 8601 or a duration back (7d).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Store window end.")] = None,
    node_queue: Annotated[
        list[str] | None,
        typer.Option(help="Queues of the store's hosts where no node list says: NODE=QUEUE,..."),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    map: Annotated[
        list[str] | None,
        typer.Option(
            help="Columns of the CSV: ROLE=COLUMN[:UNIT],... (sequence: time, total, in_use, "
            "pending, queue; job log: submit, start, end, gpus, count, queue, user, team, job, "
            "state)."
        ),
    ] = None,
    queue_from: Annotated[
        str | None,
        typer.Option(help="Where a sequence's queue is named: file, parent-dir or column:NAME."),
    ] = None,
    columns: Annotated[
        str | None,
        typer.Option(help="Column names, comma-separated, of CSV files without a header row."),
    ] = None,
    capacity: Annotated[
        list[str] | None,
        typer.Option(help="GPUs per queue where the source does not say: QUEUE=GPUS,..."),
    ] = None,
    step: Annotated[
        int | None, typer.Option(help="Step in seconds (default: the sequence's own, or 60).")
    ] = None,
    format: Annotated[FleetFormat, typer.Option(help="Output format.")] = FleetFormat.terminal,
    per_step: Annotated[
        bool,
        typer.Option(help="JSON: add the per-step sums and pending-while-idle GPUs (per_step)."),
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file.")
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(help="Read GPU series (and Kueue queues) from this Prometheus URL."),
    ] = None,
    forecast: Annotated[
        str | None,
        typer.Option(help="Forecast demand (in use + pending) this far ahead, hourly: 7d, 48h."),
    ] = None,
    plans: Annotated[
        bool,
        typer.Option(
            help="Add the off-peak plan (heat map, movable batch hours) and the consolidation plan."
        ),
    ] = False,
    batch_queue: Annotated[
        list[str] | None,
        typer.Option(help="A queue whose work can wait for quiet hours (the off-peak plan)."),
    ] = None,
    quotas: Annotated[
        list[Path] | None,
        typer.Option(
            help="Quotas: Kueue ClusterQueue/LocalQueue, Volcano or KAI Queue YAML, or "
            "TOML [quotas.NAME] gpus = N."
        ),
    ] = None,
) -> None:
    """The cluster summary: allocation per queue and pooled, pending-while-idle,
    fragmentation, findings."""
    from gpulens.app.fleet import FleetSources, parse_capacity, run_fleet
    from gpulens.config import load_config
    from gpulens.errors import ConfigError
    from gpulens.present.reports.cluster import RENDERERS, render_json
    from gpulens.present.timespec import parse_when

    if step is not None and step <= 0:
        raise ConfigError(f"--step {step}: give a number of seconds above 0")
    kinds = {"--sequence": sequence, "--jobs": jobs, "--slurm": slurm, "--k8s": k8s}
    given = [name for name, value in kinds.items() if value]
    if files:
        if len(given) != 1:
            raise ConfigError(
                f"{files[0]}: say which kind of source it is: put it after --sequence, --jobs, "
                "--slurm or --k8s (files after one such option join it when it is the only one)"
            )
        kinds[given[0]] = [*(kinds[given[0]] or []), *files]
    sequence, jobs, slurm, k8s = (kinds[k] for k in ("--sequence", "--jobs", "--slurm", "--k8s"))
    sources = FleetSources(
        sequences=sequence or [],
        jobs=jobs or [],
        slurm=slurm or [],
        slurm_commands=slurm_run or [],
        k8s=k8s or [],
        kubectl=kubectl,
        maps=map or [],
        queue_from=queue_from,
        header=[c.strip() for c in columns.split(",")] if columns else None,
        capacity=parse_capacity(capacity or []),
        step_s=step,
        now_s=int(time.time()),
        data_dir=data_dir is not None,
        node_queues=parse_capacity_like(node_queue or [], "--node-queue", "NODE=QUEUE"),
        start_ns=parse_when(since, time.time_ns(), "--since"),
        end_ns=parse_when(until, time.time_ns(), "--until"),
        prometheus=prometheus,
        now_ns=time.time_ns(),
        quotas=quotas or [],
    )
    cfg = (
        load_config(config, overrides={"data_dir": str(data_dir)})
        if data_dir is not None
        else load_config(config)
        if prometheus is not None
        else None
    )
    if per_step and format is not FleetFormat.json:
        raise ConfigError("--per-step is for --format json")
    view = run_fleet(sources, cfg)
    text = render_json(view, steps=True) if per_step else RENDERERS[format.value](view)
    if forecast is not None or plans or batch_queue or view.quotas is not None:
        text = _with_plans(text, view, format, forecast, plans, batch_queue or [], per_step)
    write_out(text, output)


def _with_plans(
    text: str,
    view: object,
    format: FleetFormat,
    forecast: str | None,
    plans: bool,
    batch_queue: list[str],
    per_step: bool,
) -> str:
    """The fleet output with the forecast, plans and quotas added (present/reports/plans.py)."""
    import orjson

    from gpulens.app.fleet import FleetView
    from gpulens.app.fleet_plans import parse_horizon, run_plans
    from gpulens.present.reports import plans as render
    from gpulens.present.reports.cluster import to_dict

    assert isinstance(view, FleetView)
    hours = parse_horizon(forecast) if forecast is not None else None
    got = run_plans(view, hours, plans or bool(batch_queue), batch_queue) if (
        hours is not None or plans or batch_queue) else None  # fmt: skip
    if format is FleetFormat.json:
        data = {**to_dict(view, per_step), **render.plans_dict(got, view.quotas)}
        option = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
        return orjson.dumps(data, option=option).decode() + "\n"
    if format is FleetFormat.html:
        return text.replace("</body>", render.render_html(got, view.quotas) + "</body>", 1)
    if format is FleetFormat.markdown:
        return text + "\n" + render.render_markdown(got, view.quotas)
    return text + render.render_terminal(got, view.quotas)
