"""The `gpulens` Typer application and its two consoles, shared by the modules that register
commands on it (cli.py: the one-shot commands; cli_live.py: the long-running ones)."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="gpulens shows what GPUs really do: useful work versus duty cycle, and who wastes it.",
)
out = Console()
err = Console(stderr=True)
