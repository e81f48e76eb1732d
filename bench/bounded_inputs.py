"""Peak RSS and wall time of whole processes on bad and oversized inputs, per shape and size.

    .venv/bin/python bench/bounded_inputs.py [--max-gb 2] [--quick] [--sizes MB,MB]
        [--only trace,upload,ingest] [--ingest-max-gb GB] [--max-events N] [--dir DIR]

Each input is written by the corpus generators (tests/corpus/traces.py; tests/corpus/captures.py
for `ingest`, skipped when that module is absent) into a temporary directory, used, and deleted
before the next one; sizes 1, 16, 128, 512, 1000 and 2000 MB up to `--max-gb` (`--quick`: 1 and
16 MB; `--sizes`: a list). gzip shapes count their inflated size (a 1 GB bomb of zeros is a
~1 MB file). Three consumers:

* `trace`: `gpulens trace FILE --format json`, one fresh process per input; its peak RSS from
  `wait4`, its wall time and exit code.
* `upload`: one `gpulens agent` (simulated collector, `agent.max_upload_bytes` 3 GiB so that
  every size reaches the loader), each input POSTed to `/api/traces/upload`; the agent's peak
  RSS over that request (its high-water mark reset before each, through /proc/PID/clear_refs)
  and the HTTP status, with the agent's RSS half a second after the answer.
* `ingest`: `gpulens ingest FILE` (+ the shape's options) into a fresh data directory, one
  process per input, as `trace`.

`--max-events N` is passed to every process as GPULENS_LIMITS_MAX_EVENTS (default: none, so
the setting's own default applies, docs/configuration.md): the columns of a trace take ~90
bytes per event and its analysis about as much again, so the count of events a process may
hold is what bounds its memory. Prints one
markdown table, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.corpus import traces as trace_corpus  # noqa: E402

GPULENS = [sys.executable, "-m", "gpulens"]
MB = 1_000_000
TRACE_SHAPES = {  # the shapes, and a valid trace
    "valid trace": "valid",
    "gzip bomb of zeros": "gzip_zeros",
    "one huge string": "huge_string",
    "long lines": "long_line",
    "deep nesting": "deep_nesting",
    "many tiny events": "many_tiny_events",
    "whitespace": "whitespace",
}
TIMEOUT_S = 900


@dataclass
class Row:
    consumer: str
    shape: str
    size: int
    file_bytes: int
    wall_s: float
    rss_mib: float
    outcome: str


def _sizes(max_gb: float, quick: bool, sizes: str | None = None) -> list[int]:
    """Input sizes in bytes: `--sizes` (MB), else 1 MB … `--max-gb` (`--quick`: 1, 16 MB)."""
    if sizes:
        return [int(float(mb) * MB) for mb in sizes.split(",")]
    ladder = [1, 16] if quick else [1, 16, 128, 512, 1000, 2000]
    return [mb * MB for mb in ladder if mb <= max_gb * 1000]


def _env(max_events: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    if max_events is not None:
        env["GPULENS_LIMITS_MAX_EVENTS"] = str(max_events)
    return env


# Each measured process is started by this small runner, started first: a child's peak RSS
# (`wait4`) counts the memory of the process it was forked from, which must stay small.
RUNNER = """
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(job["args"], stdout=subprocess.DEVNULL, stderr=err, env=job["env"])
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        text = err.read().decode(errors="replace")
    print(json.dumps({"wall": wall, "rss_kib": usage.ru_maxrss, "text": text[-4000:],
                      "code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Runner:
    """The small process that starts each measured one (see RUNNER)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, args: list[str], env: Mapping[str, str]) -> tuple[float, float, str]:
        """Run `args` to the end: wall seconds, peak RSS (MiB) and the outcome (exit code and
        the start of its error message)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"args": args, "env": dict(env)}) + "\n")
        self.proc.stdin.flush()
        done = json.loads(self.proc.stdout.readline())
        code = done["code"]
        said = " ".join(done["text"].split()).partition("error: ")[2] if code else ""
        outcome = f"exit {code}" + (f": {_short(said)}" if said else "")
        return done["wall"], done["rss_kib"] / 1024, outcome

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def _short(message: str) -> str:
    """An error message without the input's path (its first part), cut to its first words."""
    text = message.split(": ", 1)[-1]
    return text[:64].replace("|", "/")


class Agent:
    """A `gpulens agent` on a free port, for uploads; its peak RSS per request."""

    def __init__(self, tmp: Path, env: Mapping[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = tmp / "agent.toml"
        config.write_text(
            f'data_dir = "{tmp / "agent-data"}"\n[collect]\ncollectors = ["simulated"]\n'
            f'[simulated]\nhosts = 1\n[agent]\nlisten = "127.0.0.1:{port}"\n'
            f"max_upload_bytes = {3 * 1024**3}\n",
            encoding="utf-8",
        )
        self.log = (tmp / "agent.log").open("wb")
        self.proc = subprocess.Popen(
            [*GPULENS, "agent", "--config", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(env),
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent did not start; see {tmp / 'agent.log'}")
            time.sleep(0.3)

    def _status(self, key: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return float("nan")

    def upload(self, path: Path) -> tuple[float, float, str]:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # reset the high-water mark
        start = time.perf_counter()

        def body() -> Iterator[bytes]:
            with path.open("rb") as f:
                while block := f.read(1 << 20):
                    yield block

        try:
            r = httpx.post(
                f"{self.url}/api/traces/upload",
                params={"name": path.name},
                content=body(),
                headers={"content-type": "application/octet-stream"},
                timeout=TIMEOUT_S,
            )
            outcome = f"HTTP {r.status_code}"
            if r.status_code != 200:
                outcome += f": {_short(str(r.json().get('detail', '')))}"
        except httpx.HTTPError as exc:
            outcome = f"failed: {type(exc).__name__}"
        wall = time.perf_counter() - start
        time.sleep(0.5)  # the memory handed back after the response
        outcome += f" (agent RSS after: {self._status('VmRSS:'):,.0f} MiB)"
        return wall, self._status("VmHWM:"), outcome

    def close(self) -> float:
        """SIGTERM; the seconds it took to exit."""
        start = time.perf_counter()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return time.perf_counter() - start


def _captures() -> tuple[Mapping[str, Callable[[Path, int], Path]], Mapping[str, list[str]]]:
    try:
        from tests.corpus import captures
    except ImportError:
        return {}, {}
    return getattr(captures, "CASES", {}), getattr(captures, "INGEST_ARGS", {})


def run(args: argparse.Namespace) -> list[Row]:
    consumers = set(args.only.split(","))
    env = _env(args.max_events)
    rows: list[Row] = []
    base = Path(tempfile.mkdtemp(prefix="gpulens-bounded-", dir=args.dir))
    runner = Runner()
    agent = Agent(base, env) if "upload" in consumers else None
    try:
        for size in _sizes(args.max_gb, args.quick, args.sizes):
            for shape, case in TRACE_SHAPES.items():
                work = base / "input"
                work.mkdir()
                path = trace_corpus.CASES[case](work, size)
                file_bytes = path.stat().st_size
                if "trace" in consumers:
                    result = runner.run([*GPULENS, "trace", str(path), "--format", "json"], env)
                    rows.append(Row("trace", shape, size, file_bytes, *result))
                    _show(rows[-1])
                if agent is not None:
                    rows.append(Row("upload", shape, size, file_bytes, *agent.upload(path)))
                    _show(rows[-1])
                shutil.rmtree(work)
        if "ingest" in consumers:
            cases, ingest_args = _captures()
            if not cases:
                print("tests/corpus/captures.py is not there yet: no ingest rows", flush=True)
            for size in _sizes(min(args.max_gb, args.ingest_max_gb), args.quick, args.sizes):
                for shape, make in cases.items():
                    work = base / "input"
                    work.mkdir()
                    path = make(work, size)
                    data = base / "ingest-data"
                    cmd = [*GPULENS, "ingest", str(path), "--data-dir", str(data)]
                    result = runner.run([*cmd, *ingest_args.get(shape, [])], env)
                    rows.append(Row("ingest", shape, size, path.stat().st_size, *result))
                    _show(rows[-1])
                    shutil.rmtree(work)
                    shutil.rmtree(data, ignore_errors=True)
    finally:
        runner.close()
        if agent is not None:
            print(f"agent stopped {agent.close():.1f} s after SIGTERM", flush=True)
        shutil.rmtree(base, ignore_errors=True)
    return rows


def _show(row: Row) -> None:
    print(
        f"  {row.consumer:<7} {row.shape:<20} {row.size / MB:>7,.0f} MB  {row.wall_s:7.1f} s  "
        f"{row.rss_mib:7.0f} MiB  {row.outcome}",
        flush=True,
    )


def table(rows: list[Row]) -> str:
    out = [
        "| consumer | shape | size MB (inflated) | file MB | wall s | peak RSS MiB | outcome |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.consumer} | {r.shape} | {r.size / MB:,.0f} | {r.file_bytes / MB:,.1f} | "
            f"{r.wall_s:.1f} | {r.rss_mib:,.0f} | {r.outcome} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gb", type=float, default=2.0, help="largest input (GB)")
    parser.add_argument("--quick", action="store_true", help="1 MB and 16 MB only")
    parser.add_argument("--sizes", help="these sizes only, in MB (e.g. 1000,2000)")
    parser.add_argument("--only", default="trace,upload,ingest", help="consumers to run")
    parser.add_argument("--ingest-max-gb", type=float, default=2.0, help="largest ingest input")
    parser.add_argument("--max-events", type=int, help="GPULENS_LIMITS_MAX_EVENTS for every run")
    parser.add_argument("--dir", type=Path, help="where the temporary inputs go")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the agent on the way out
    load_before = os.getloadavg()
    rows = run(args)
    load_after = os.getloadavg()
    print()
    print(table(rows))
    print(
        f"\nload average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        f"({os.cpu_count()} cores); limits.max_events "
        f"{'default' if args.max_events is None else f'{args.max_events:,}'}"
    )


if __name__ == "__main__":
    main()
