"""The `gpulens` console entry point: `gpulens trace` straight to its own parser
(present/trace_cli.py), without importing typer, click, rich or pydantic; every other command
through the Typer app (present/cli.py).

`--debug` before `trace` is the app's option and is honoured here too; `--help` or `--version`
before it go to the app, as does everything else. `agent` and `record` first keep pandas out
of the process (app/lean.py); they and `demo` end it at once when threads they abandoned at
their stop still run (`leave`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import NoReturn

#: commands that run for long (hours, months): pandas is kept out of their memory
LONG_RUNNING = frozenset({"agent", "record"})
#: commands stopped by a signal, which may leave threads running (`leave`)
STOPPED_BY_SIGNAL = LONG_RUNNING | {"demo"}


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
    command = args[0] if args else ""
    if command in LONG_RUNNING:
        from gpulens.app.heap import arrow_on_system_heap
        from gpulens.app.lean import keep_pandas_out

        arrow_on_system_heap()  # before pyarrow is imported (app/heap.py)
        keep_pandas_out()  # before anything converts a list with pyarrow (app/lean.py)
    from gpulens.present.cli import main as app_main

    if command not in STOPPED_BY_SIGNAL:
        app_main()
        return
    try:
        app_main()
    except SystemExit as done:
        leave(done.code)
    leave(0)


def leave(code: int | str | None) -> NoReturn:
    """End the process with `code` (SystemExit's meaning). When threads the command abandoned
    at its stop still run (a findings pass or a dashboard analysis inside DuckDB at SIGTERM, a
    collector waiting on a source), end it at once, without the interpreter's finalization:
    C++ libraries' static destructors (DuckDB's, Arrow's) running under a thread that is still
    inside them abort the process (SIGABRT) after its work is done. The command has flushed
    its readings by then, or said that it could not (an agent whose recorder did not stop in
    time); stdout, stderr and the log handlers are flushed here, and store work still running
    in a child process (app/store_child.py) is killed."""
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    if not busy:
        sys.exit(code)
    children = sys.modules.get("gpulens.app.store_child")
    if children is not None:
        children.kill_children()  # their parent will not wait for them
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code or 0)
