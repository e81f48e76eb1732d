"""Kill store writers and compactors with SIGKILL at random moments, many times.

After every kill the store must open and read without error, hold every row a writer
reported as flushed, hold no row twice, and never show a temporary file to readers.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpulens.model import Kind
from gpulens.store import Store, compact
from gpulens.store.layout import day_of

WORKER = Path(__file__).with_name("store_crash_worker.py")
KILLS = 20


def start(*args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def kill(proc: subprocess.Popen[str]) -> list[str]:
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate()
    return out.splitlines()


def check(data_dir: Path, reported: dict[str, int]) -> None:
    with Store(data_dir) as store:
        for kind in Kind:
            assert all(not f.name.startswith(".") for f in store.files(kind))
        if not store.files(Kind.GPU):  # killed before its first flush: nothing may be claimed
            assert all(top < 0 for top in reported.values())
            return
        rows = store.query(
            "SELECT job_id, count(*) AS n, count(DISTINCT seq) AS d, "
            "max(seq) AS top, list(seq) AS seqs FROM gpu GROUP BY job_id"
        ).to_pylist()
    got = {r["job_id"]: r for r in rows}
    for run, top in reported.items():
        if top < 0:
            continue
        r = got.get(run)
        assert r is not None, f"{run}: rows reported flushed up to seq {top} are all missing"
        assert r["n"] == r["d"], f"{run}: {r['n'] - r['d']} rows stored twice"
        flushed = {s for s in r["seqs"] if s <= top}
        assert len(flushed) == top + 1, f"{run}: lost {top + 1 - len(flushed)} flushed rows"
    for run, r in got.items():
        assert r["n"] == r["d"], f"{run}: rows stored twice"


@pytest.mark.slow
def test_sigkill_writers_and_compactors_never_lose_or_duplicate(tmp_path: Path) -> None:
    rng = random.Random(20251124)
    reported: dict[str, int] = {}
    deadline = time.monotonic() + 60
    for i in range(KILLS):
        run = f"run-{i}"
        writer = start("write", str(tmp_path), run)
        compactor = start("compact", str(tmp_path)) if i % 2 else None
        time.sleep(rng.uniform(0.05, 0.25))
        if compactor is not None:
            kill(compactor)
            time.sleep(rng.uniform(0.0, 0.05))
        lines = kill(writer)
        flushed = [int(ln.split()[1]) for ln in lines if ln.startswith("flushed ")]
        reported[run] = max(flushed, default=-1)
        check(tmp_path, reported)
        assert time.monotonic() < deadline, "the crash test is too slow"
    assert sum(1 for v in reported.values() if v >= 0) >= KILLS // 2
    # a final, uninterrupted compaction leaves the same content
    compact(tmp_path, min_age_seconds=0, delete_grace_seconds=0)
    check(tmp_path, reported)
    with Store(tmp_path) as store:
        assert [f.name[:4] for f in store.files(Kind.GPU)] == ["cmp-"]


DAY_NS = 86_400 * 1_000_000_000
OLD_DAYS, KEPT_DAYS, SEGMENTS, ROWS = 6, 2, 30, 8


def old_store(root: Path) -> None:
    """OLD_DAYS + KEPT_DAYS days of GPU segments, SEGMENTS x ROWS rows a day."""
    from gpulens.model import Reading
    from gpulens.store import SegmentWriter

    w = SegmentWriter(root, "retain", flush_seconds=3600)
    base = 1_764_000_000 * 1_000_000_000
    for day in range(OLD_DAYS + KEPT_DAYS):
        for seg in range(SEGMENTS):
            ts = base + day * DAY_NS + seg * 60 * 1_000_000_000
            w.append(
                [
                    Reading(Kind.GPU, ts + g, {"host": "n1", "gpu_uuid": f"GPU-{g}"}, {"seq": 1.0})
                    for g in range(ROWS)
                ]
            )
            w.flush()
    w.close()


@pytest.mark.slow
def test_sigkill_during_retention_leaves_whole_days(tmp_path: Path) -> None:
    import shutil

    template = tmp_path / "template"
    old_store(template)
    base = 1_764_000_000 * 1_000_000_000
    now = base + (OLD_DAYS + KEPT_DAYS - 1) * DAY_NS + 3600 * 1_000_000_000
    rng = random.Random(20251202)
    interrupted = 0
    for i in range(8):
        data = tmp_path / f"run-{i}"
        shutil.copytree(template, data)
        proc = start("retain", str(data), str(now), str(KEPT_DAYS))
        time.sleep(rng.uniform(0.0, 0.03))
        lines = kill(proc)
        interrupted += "done" not in lines
        with Store(data) as store:
            assert all(not f.name.startswith(".") for f in store.files(Kind.GPU))
            rows = store.query(
                "SELECT CAST(ts AS DATE) AS day, count(*) AS n FROM gpu GROUP BY day ORDER BY day"
            ).to_pylist()
        counts = [r["n"] for r in rows]
        assert len(counts) >= KEPT_DAYS
        # a day is whole or gone, and the kept days are all there
        assert all(n == SEGMENTS * ROWS for n in counts), counts
        kept = [day_of(base + d * DAY_NS) for d in range(OLD_DAYS, OLD_DAYS + KEPT_DAYS)]
        assert [str(r["day"]) for r in rows[-KEPT_DAYS:]] == kept
        # the next run finishes the job, leftovers included
        from gpulens.clock import FakeClock
        from gpulens.store.retention import apply_retention

        apply_retention(data, KEPT_DAYS, clock=FakeClock(now))
        with Store(data) as store:
            (n,) = store.query("SELECT count(*) AS n FROM gpu").column("n").to_pylist()
        assert n == KEPT_DAYS * SEGMENTS * ROWS
        assert not [p for p in (data / "gpu").iterdir() if p.name.startswith(".deleting-")]
        shutil.rmtree(data)
    assert interrupted >= 2, "no kill landed during retention"
