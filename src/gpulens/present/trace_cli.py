"""`gpulens trace`'s arguments, declared once (`PARAMS`), parsed with argparse.

`gpulens trace` is the command run on many small files, where start-up is most of the time:
typer, click, rich and pydantic take ~0.2 s to import, the analysis of a small trace ~0.04 s.
So the entry point (present/entry.py) hands `trace` straight to `main` here, which imports none
of them, and the Typer app's `trace` command (present/cli.py) hands its arguments here too:
one parser, one help text, the same errors and exit codes whichever way the command is reached.

Usage errors are reported as Click reports them (usage line, hint, `Error: ...`, exit code 2);
the command's own errors as present/cli.py's `main` does (one line, the GpulensError's
`exit_code`; `--debug` shows the traceback instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from gpulens.errors import ConfigError, GpulensError

__all__ = ["FORMATS", "HELP", "NAME", "PARAMS", "Param", "execute", "main", "parser"]

NAME = "trace"
HELP = "Analyse PyTorch profiler (Kineto) traces: idle gaps and their causes, per rank."
FORMATS = ("terminal", "markdown", "html", "json")  # gpulens.present.reports.trace.RENDERERS
USAGE_EXIT = 2  # Click's exit code for usage errors
UNRECOGNIZED = "unrecognized arguments: "  # how argparse starts its message for extra arguments


@dataclass(frozen=True)
class Param:
    """One argument or option: argparse's flags (a bare name for the argument), help, and the
    rest of `add_argument`'s keywords."""

    flags: tuple[str, ...]
    help: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def default(self) -> Any:
        return self.options.get("default")


PARAMS: tuple[Param, ...] = (
    Param(
        ("paths",),
        "Trace files, or directories of rank files (one job).",
        {"nargs": "+", "metavar": "PATHS"},
    ),
    Param(
        ("--format",),
        "Output format.",
        {"choices": FORMATS, "default": "terminal", "metavar": "[" + "|".join(FORMATS) + "]"},
    ),
    Param(("--output", "-o"), "Write to this file.", {"metavar": "PATH"}),
    Param(
        ("--compare",),
        "Traces of an earlier run of the same job: show before/after deltas.",
        {"action": "append", "metavar": "PATH"},
    ),
    Param(
        ("--executor",),
        "Where the ranks are analysed: local (this process), processes:N (a local pool), or "
        "dask://HOST:PORT (a Dask cluster whose workers read the files themselves). "
        "Default: local for one file, a process pool for several.",
        {"metavar": "local|processes:N|dask://HOST:PORT"},
    ),
    Param(
        ("--hta-window",),
        "Select events as HTA does (its ProfilerStep window).",
        {"action": argparse.BooleanOptionalAction, "default": False},
    ),
)


class _Parser(argparse.ArgumentParser):
    """argparse with Click's usage errors: usage line, hint, `Error: ...`, exit code 2."""

    def format_help(self) -> str:
        return super().format_help().replace("usage:", "Usage:", 1)

    def error(self, message: str) -> NoReturn:
        unknown = message.removeprefix(UNRECOGNIZED)
        if unknown != message:
            message = self._no_such_option(unknown.split()) or message
        sys.stderr.write(
            f"{self.format_usage().replace('usage:', 'Usage:', 1)}"
            f"Try '{self.prog} --help' for help.\n\nError: {message}\n"
        )
        sys.exit(USAGE_EXIT)

    def _no_such_option(self, extras: list[str]) -> str | None:
        """Click's words for the first unknown option in `extras`, with the nearest known
        options (difflib, as Click does); None when none of them is an option."""
        import difflib

        name = next((a.partition("=")[0] for a in extras if a.startswith("-")), None)
        if name is None:
            return None
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        near = sorted(difflib.get_close_matches(name, known))
        if len(near) == 1:
            return f"No such option: {name} Did you mean {near[0]}?"
        if near:
            return f"No such option: {name} (Possible options: {', '.join(near)})"
        return f"No such option: {name}"


def parser(prog: str = f"gpulens {NAME}") -> argparse.ArgumentParser:
    """The parser of `gpulens trace`'s arguments, built from `PARAMS`."""
    p = _Parser(
        prog=prog,
        usage="%(prog)s [OPTIONS] PATHS...",
        description=HELP,
        allow_abbrev=False,
        add_help=False,
    )
    arguments, options = p.add_argument_group("Arguments"), p.add_argument_group("Options")
    for param in PARAMS:
        shown = param.help
        if param.default is not None:
            default = param.default
            if isinstance(default, bool):
                default = ("" if default else "no-") + param.flags[0].lstrip("-")
            shown += f" [default: {default}]"
        group = options if param.flags[0].startswith("-") else arguments
        group.add_argument(*param.flags, help=shown, **param.options)
    options.add_argument("--help", action="help", help="Show this message and exit.")
    return p


def execute(argv: Sequence[str]) -> None:
    """Parse `argv` (the arguments after `trace`), analyse, write the report.

    `--help` and usage errors exit (SystemExit); the analysis raises GpulensError (ConfigError
    for an unknown format)."""
    args = parser().parse_intermixed_args(list(argv))
    from gpulens.present.reports.trace import run_trace

    try:
        text = run_trace(
            args.paths,
            args.format,
            args.output,
            args.compare or (),
            args.hta_window,
            args.executor,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.output is not None:
        sys.stderr.write(f"wrote {args.output}\n")
    else:
        sys.stdout.write(text)


def _fail(label: str, message: str, code: int) -> int:
    red = sys.stderr.isatty()
    sys.stderr.write(f"\x1b[31m{label}\x1b[0m" if red else label)
    sys.stderr.write(f" {message}\n")
    return code


def main(argv: Sequence[str], *, debug: bool = False) -> int:
    """`execute` with present/cli.py's error mapping: the exit code to exit with."""
    try:
        execute(argv)
    except GpulensError as exc:
        if debug:
            raise
        return _fail("error:", str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        if debug:
            raise
        return _fail("internal error:", f"{type(exc).__name__}: {exc} (rerun with --debug)", 70)
    return 0
