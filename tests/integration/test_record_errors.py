"""Store errors are said while they happen, by real `gpulens record`, `agent` and `ingest`
processes: an unwritable data directory fails at start; a full disk (a file-size limit on the
process, lifted later: writes fail as on a full disk, without root) is said at once, shows in
/metrics, and every buffered reading is written once space is back; ingest says its readings
were not stored."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

GPULENS = [sys.executable, "-m", "gpulens"]
T4 = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
#: segments are larger than this, so every flush fails while the limit holds
FULL_DISK_BYTES = 2000


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    out["COLUMNS"] = "400"
    return out


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot create files in: a read-only one, or, for root (whom
    permissions do not stop), /proc."""
    if os.geteuid() == 0:
        return Path("/proc")
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    return ro


def config(tmp_path: Path, data: Path, store: str = "", extra: str = "") -> Path:
    path = tmp_path / "gpulens.toml"
    path.write_text(
        f'data_dir = "{data}"\nhost = "rec"\n[collect]\ncollectors = ["simulated"]\n'
        f"[store]\nflush_seconds = 0.5\n{store}[simulated]\nhosts = 1\n{extra}",
        encoding="utf-8",
    )
    return path


def full_disk() -> None:
    """In the child: files may not grow past FULL_DISK_BYTES (Python ignores SIGXFSZ, so a
    write past it fails with EFBIG, as one fails with ENOSPC on a full disk)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_DISK_BYTES, resource.RLIM_INFINITY))


def space_back(pid: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)


class Lines:
    """Reads a pipe in a thread, keeping each line with the time it arrived."""

    def __init__(self, stream: object, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, text: str, timeout_s: float) -> float:
        """When the first line holding `text` arrived; fails after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in self.lines:
                if text in line:
                    return at
            if self.proc.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} in {timeout_s:g} s: {self.text()}")

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def ticks_stored(data: Path) -> int:
    files = [str(f) for f in (data / "gpu").rglob("*.parquet")]
    ((n,),) = duckdb.sql(
        f"SELECT count(DISTINCT ts) FROM read_parquet({files!r}, union_by_name=true) "
        "WHERE host = 'sim-node-0'"
    ).fetchall()
    return int(n)


def test_record_into_an_unwritable_directory_fails_at_start(tmp_path: Path) -> None:
    data = unwritable_dir(tmp_path)
    started = time.monotonic()
    proc = subprocess.run(
        [*GPULENS, "record", "--config", str(config(tmp_path, data)), "--duration", "30"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )
    assert time.monotonic() - started < 15  # not after the 30 s it was asked to record
    assert proc.returncode == 5, proc.stderr  # StoreError's exit code
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"the data directory '{data}' cannot be written" in line and "--data-dir" in line
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("fault", ["read-only", "full disk"])
def test_ingest_that_cannot_write_promises_no_next_flush(
    fault: str, tmp_path: Path, shared: Path
) -> None:
    data = unwritable_dir(tmp_path) if fault == "read-only" else tmp_path / "data"
    proc = subprocess.run(
        [*GPULENS, "ingest", str(shared / T4), "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        preexec_fn=full_disk if fault == "full disk" else None,
    )
    assert proc.returncode == 5, proc.stderr
    message = " ".join(proc.stderr.split())
    assert str(data) in message and "next flush" not in message, message
    if fault == "full disk":
        assert re.search(r"the \d+ readings still buffered were not stored", message), message


@pytest.fixture
def recording(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Lines, Path]]:
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [*GPULENS, "record", "--config", str(config(tmp_path, data)), "--duration", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        preexec_fn=full_disk,
    )
    try:
        yield proc, Lines(proc.stderr, proc), data
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_record_on_a_full_disk_says_so_at_once_and_writes_all_once_space_is_back(
    recording: tuple[subprocess.Popen[str], Lines, Path],
) -> None:
    proc, stderr, data = recording
    started = stderr.wait_for("Recording", 30)
    failed = stderr.wait_for("warning:", 10)
    assert failed - started < 5, stderr.text()  # the first failed flush, not at exit
    assert proc.poll() is None
    said = next(line for _, line in stderr.lines if "warning:" in line)
    assert "File too large" in said and "readings buffered in memory" in said
    assert "store.max_buffered_rows" in said
    time.sleep(1.5)  # three more failed flushes: said once, not once per flush
    assert sum("warning:" in line for _, line in stderr.lines) == 1, stderr.text()
    space_back(proc.pid)
    stderr.wait_for("takes writes again", 10)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, stderr.text()
    summary = stderr.wait_for(" ticks, ", 5)
    ticks = int(next(line for at, line in stderr.lines if at == summary).split()[0])
    assert ticks_stored(data) == ticks  # nothing lost: the buffer was kept and written


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=5).text
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("gpulens_store_")
    }


def until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.25)


def test_agent_on_a_full_disk_shows_it_in_metrics(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = config(
        tmp_path,
        tmp_path / "data",
        store="max_buffered_rows = 50000\n",
        extra=f'[agent]\nlisten = "127.0.0.1:{port}"\n',
    )
    proc = subprocess.Popen(
        [*GPULENS, "agent", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        preexec_fn=full_disk,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        stderr = Lines(proc.stderr, proc)
        stderr.wait_for("warning:", 30)
        first = metrics(url)
        until(lambda: metrics(url)["gpulens_store_flush_errors_total"] >= 2, 10, "no errors")
        second = metrics(url)
        assert second["gpulens_store_buffered_rows"] > first["gpulens_store_buffered_rows"] > 0
        assert second["gpulens_store_max_buffered_rows"] == 50000
        assert second["gpulens_store_rows_written_total"] == 0
        space_back(proc.pid)
        until(lambda: metrics(url)["gpulens_store_rows_written_total"] > 0, 10, "no writes")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, stderr.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
