"""`gpulens profile`: ask a tracked job to profile a few steps, then show the analysed trace
(registered on the app by cli.py; the files and the analysis are app/profiles.py's)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gpulens.app import profiles
from gpulens.config import load_config
from gpulens.errors import GpulensError
from gpulens.present.console import app, err, out


class ProfileFormat(StrEnum):
    terminal = "terminal"
    json = "json"


class NoAnswer(GpulensError):
    """No tracked process answered the request in time."""

    exit_code = 1


def _show(results: list[dict[str, Any]], format: ProfileFormat) -> None:
    if format is ProfileFormat.json:
        out.print_json(json.dumps(results))
        return
    for r in results:
        if "error" in r:
            out.print(f"{escape(r['trace_path'])}: [red]not analysed[/red] {escape(r['error'])}")
            continue
        asked = (r.get("finding") or {}).get("rule_id")
        link = f"{asked} on job {r['job_id']} -> " if asked else f"job {r['job_id']}: "
        out.print(escape(link + r["summary"]), highlight=False, soft_wrap=True)
        out.print(f"  trace: {escape(r['trace_path'])}", soft_wrap=True)
        for line in r.get("trace_findings") or []:
            out.print(f"  trace finding: {escape(line)}", highlight=False)


@app.command()
def profile(
    job: Annotated[str, typer.Option(help="The tracked job to profile (its job_id).")],
    steps: Annotated[
        int | None,
        typer.Option(help="Steps to capture (default: the profile.steps setting).", min=1),
    ] = None,
    finding: Annotated[
        str | None,
        typer.Option(help="The finding's rule this profile answers (e.g. input_bound)."),
    ] = None,
    wait: Annotated[
        float,
        typer.Option(help="Seconds to wait for the trace (0: ask and return).", min=0),
    ] = 300.0,
    list_only: Annotated[
        bool, typer.Option("--list", help="Show the job's analysed profiles; ask nothing.")
    ] = False,
    data_dir: Annotated[
        str | None, typer.Option(help="The tracked job's data dir (a local directory).")
    ] = None,
    format: Annotated[ProfileFormat, typer.Option(help="Output format.")] = (
        ProfileFormat.terminal
    ),
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
) -> None:
    """Make a tracked training process (gpulens.torch.track) profile N steps with
    torch.profiler, then analyse the trace as `gpulens trace` does and link it to the finding
    that asked. The process polls the request on each tracker interval; `kill -USR2 PID` asks
    one process directly."""
    cfg = load_config(config, overrides={"data_dir": data_dir} if data_dir else None)
    root = profiles.local_dir(cfg)
    if list_only:
        _show(profiles.results(root, job), format)
        return
    n = steps if steps is not None else int(cfg.get("profile.steps"))
    ref = {"rule_id": finding, "subject": {"job_id": job}} if finding else None
    req = profiles.request(root, job, n, ref, ttl_s=max(wait, profiles.DEFAULT_TTL_S))
    if format is ProfileFormat.terminal:
        err.print(f"asked job {escape(job)} to profile {n} step(s) (request {req.id})")
    if wait == 0:
        return
    found = profiles.wait_for(root, req, wait)
    if not found:
        raise NoAnswer(
            f"no tracked process of job {job!r} answered within {wait:g} s: is it running "
            f"with gpulens.torch.track and the data dir {str(root)!r}? (The request stays "
            "until it expires; `gpulens profile --job ... --list` shows what arrives.)"
        )
    _show([profiles.analysed_or_error(p) for p in found], format)
