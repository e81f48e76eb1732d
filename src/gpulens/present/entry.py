"""The `gpulens` console entry point: `gpulens trace` straight to its own parser
(present/trace_cli.py), without importing typer, click, rich or pydantic; every other command
through the Typer app (present/cli.py).

`--debug` before `trace` is the app's option and is honoured here too; `--help` or `--version`
before it go to the app, as does everything else. `agent` and `record` first keep pandas out
of the process (app/lean.py).
"""

from __future__ import annotations

import sys

#: commands that run for long (hours, months): pandas is kept out of their memory
LONG_RUNNING = frozenset({"agent", "record"})


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
    if args[:1] and args[0] in LONG_RUNNING:
        from gpulens.app.lean import keep_pandas_out

        keep_pandas_out()  # before anything converts a list with pyarrow (app/lean.py)
    from gpulens.present.cli import main as app_main

    app_main()
