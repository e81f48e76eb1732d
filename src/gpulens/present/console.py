"""The `gpulens` Typer application and its two consoles, shared by the modules that register
commands on it (cli.py: the one-shot commands; cli_live.py: the long-running ones)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from typer.core import TyperCommand
from typer.models import CommandFunctionType

from gpulens.errors import StoreError


class UsageCommand(TyperCommand):
    """Typer's command whose usage errors always carry their context, so that they print the
    usage line: Click raises a missing option value (`--config` at the end) without it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # a UsageError of whichever copy of click typer carries
            if getattr(exc, "ctx", False) is None and hasattr(exc, "format_message"):
                exc.ctx = ctx  # type: ignore[attr-defined]
                exc.cmd = ctx.command  # type: ignore[attr-defined]
            raise


class UsageApp(typer.Typer):
    """A Typer app whose commands are `UsageCommand`s unless they name their class."""

    def command(
        self, *args: Any, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", UsageCommand)
        return super().command(*args, **kwargs)


app = UsageApp(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # --debug tracebacks must not print the token
    help="gpulens shows what GPUs really do: useful work versus duty cycle, and who wastes it.",
)
out = Console()
err = Console(stderr=True)


def write_out(text: str, path: Path | None) -> None:
    """`text` into the file `path` (saying so on stderr), or onto stdout without one; a file
    that cannot be written is one clear error naming it."""
    if path is None:
        sys.stdout.write(text)
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StoreError(
            f"cannot write {str(path)!r} ({exc.strerror}): choose another -o/--output path"
        ) from None
    err.print(f"wrote {path}")
