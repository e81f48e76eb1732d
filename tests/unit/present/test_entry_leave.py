"""A long-running command ends its process at once when threads it abandoned still run inside
native code: the interpreter's finalization under such a thread aborts (SIGABRT)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# threads inside DuckDB queries over Arrow data when the main thread ends, as a findings pass
# or a dashboard analysis still running at SIGTERM
BUSY = """
import sys, threading, time
import duckdb, pyarrow as pa

def work():
    con = duckdb.connect()
    t = pa.table({"x": pa.array(range(2_000_000))})
    for _ in range(10_000):
        con.sql("SELECT sum(x * x) FROM t").fetchall()

for _ in range(4):
    threading.Thread(target=work, daemon=True).start()
time.sleep(1.0)
print("readings flushed")
"""


def _run(ending: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BUSY + ending], capture_output=True, text=True, timeout=120
    )


def test_busy_threads_do_not_abort_the_exit() -> None:
    done = _run("from gpulens.present.entry import leave\nleave(0)\n")
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout == "readings flushed\n"


def test_the_exit_code_and_message_are_kept() -> None:
    assert _run("from gpulens.present.entry import leave\nleave(3)\n").returncode == 3
    done = _run("from gpulens.present.entry import leave\nleave('error: the disk is full')\n")
    assert done.returncode == 1
    assert done.stderr.strip().endswith("error: the disk is full")
    assert done.stdout == "readings flushed\n"


def test_without_leave_the_same_exit_aborts() -> None:
    """The failure `leave` prevents: a plain exit under the same busy threads aborts (17 of 20
    runs here; the finalization races the threads, so up to five tries)."""
    codes = []
    for _ in range(5):
        codes.append(_run("sys.exit(0)\n").returncode)
        if codes[-1] != 0:
            break
    assert codes[-1] in (-6, -11), codes  # SIGABRT (or SIGSEGV)


def test_no_busy_thread_is_a_plain_exit() -> None:
    """Without busy threads `leave` is sys.exit: the interpreter's exit handlers run."""
    script = (
        "import atexit\natexit.register(print, 'exit handlers ran')\n"
        "from gpulens.present.entry import leave\nprint('ok')\nleave(4)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (4, "ok\nexit handlers ran\n")


def test_with_busy_threads_the_exit_handlers_do_not_run_and_children_are_killed() -> None:
    """`leave` under busy threads skips finalization (no exit handler runs) and kills the store
    work still running in a child process, which nobody would wait for."""
    script = BUSY + (
        "import atexit, subprocess, threading\n"
        "atexit.register(print, 'exit handlers ran')\n"
        "from gpulens.app import store_child\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "store_child._running.add(child)\n"
        "print(child.pid, flush=True)\n"
        "from gpulens.present.entry import leave\nleave(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-500:]
    flushed, pid = done.stdout.splitlines()
    assert flushed == "readings flushed"
    status = Path(f"/proc/{pid}/status")
    # killed: gone, or a zombie until init reaps it
    assert not status.exists() or "zombie" in status.read_text()
