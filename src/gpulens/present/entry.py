"""The `gpulens` console entry point: `gpulens trace` straight to its own parser
(present/trace_cli.py), without importing typer, click, rich or pydantic; every other command
through the Typer app (present/cli.py).

`--debug` before `trace` is the app's option and is honoured here too; `--help` or `--version`
before it go to the app, as does everything else.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run the process's command line and exit."""
    args = sys.argv[1:]
    debug = False
    while args[:1] == ["--debug"]:
        debug = True
        args.pop(0)
    if args[:1] == ["trace"]:
        from gpulens.present import trace_cli

        sys.exit(trace_cli.main(args[1:], debug=debug))
    from gpulens.present.cli import main as app_main

    app_main()
