"""Long-running processes allocate Arrow's buffers on glibc's heap, which they hand back."""

from __future__ import annotations

import os
import subprocess
import sys

from gpulens.app.heap import POOL_VARIABLE

# what the pool is in a process started as `gpulens record` (the command itself replaced)
AS_RECORD = """
import sys
import gpulens.present.cli as cli
def report():
    import os, pyarrow as pa
    probe = "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"
    child = __import__("subprocess").run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(pa.default_memory_pool().backend_name, os.environ.get("ARROW_DEFAULT_MEMORY_POOL"),
          child)
cli.main = report
sys.argv = ["gpulens", "record"]
from gpulens.present.entry import main
main()
"""


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != POOL_VARIABLE}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, **env}, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    return done.stdout.strip()


def test_a_long_running_command_and_its_children_allocate_on_the_system_heap() -> None:
    assert _run(AS_RECORD) == "system system system"


def test_a_pool_chosen_in_the_environment_is_kept() -> None:
    assert _run(AS_RECORD, ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc jemalloc jemalloc"


def test_a_short_command_keeps_arrow_s_default() -> None:
    code = AS_RECORD.replace('"record"', '"report"')
    assert _run(code).split()[0] != "system"


def test_pyarrow_imported_first_switches_at_once() -> None:
    code = (
        "import pyarrow as pa\nfrom gpulens.app.heap import arrow_on_system_heap\n"
        "print(arrow_on_system_heap(), pa.default_memory_pool().backend_name)"
    )
    assert _run(code) == "True system"
