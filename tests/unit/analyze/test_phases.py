"""Warm-up windows: found where metrics settle, capped, and absent when the start is unseen."""

from __future__ import annotations

from gpulens.analyze.phases import in_windows, warmup_windows

from .helpers import STEP_NS, T0, frame, row


def _run(levels: list[float], mem: list[float] | None = None, first_mem: float = 0.0,
         offset: int = 0) -> list[dict[str, object]]:  # fmt: skip
    mem = mem or [50e9] * len(levels)
    return [row(start_ns=T0 + (offset + i) * STEP_NS, sm_active=a, memory_used_bytes=m,
                memory_used_first=first_mem if i == 0 else m)
            for i, (a, m) in enumerate(zip(levels, mem, strict=True))]  # fmt: skip


def test_warmup_ends_when_activity_settles() -> None:
    w = warmup_windows(frame(*_run([0.1, 0.3, 0.6, 0.88, 0.9, 0.9, 0.91, 0.9]))).to_pylist()
    assert len(w) == 1
    assert w[0]["start_ns"] == T0 and w[0]["end_ns"] == T0 + 3 * STEP_NS
    assert (w[0]["intervals"], w[0]["capped"]) == (3, False)


def test_warmup_waits_for_memory_to_stop_ramping() -> None:
    mem = [10e9, 20e9, 30e9, 40e9, 50e9, 50e9, 50e9, 50e9]
    w = warmup_windows(frame(*_run([0.9] * 8, mem))).to_pylist()
    assert w[0]["intervals"] == 4  # 45 GB (0.9 of the steady 50 GB) is first reached at 4


def test_no_warmup_when_steady_from_the_start() -> None:
    assert warmup_windows(frame(*_run([0.9] * 6))).num_rows == 0


def test_unseen_start_has_no_window() -> None:
    # the job held the GPU, memory in use, from the frame's first sample
    rows = _run([0.1, 0.2, 0.9, 0.9, 0.9, 0.9], first_mem=50e9)
    assert warmup_windows(frame(*rows)).num_rows == 0


def test_a_job_that_starts_later_on_the_gpu_is_seen() -> None:
    before = [row(start_ns=T0, job_id=None, pid=None, processes=0, sm_active=0.0,
                  memory_used_bytes=0.0, memory_used_first=0.0)]  # fmt: skip
    rows = before + _run([0.2, 0.9, 0.9, 0.9, 0.9], first_mem=50e9, offset=1)
    w = warmup_windows(frame(*rows)).to_pylist()
    assert [(x["start_ns"], x["intervals"]) for x in w] == [(T0 + STEP_NS, 1)]


def test_warmup_is_capped() -> None:
    rows = _run([0.1, 0.5, 0.2, 0.6, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])
    w = warmup_windows(frame(*rows), max_warmup_s=120).to_pylist()
    assert (w[0]["intervals"], w[0]["capped"]) == (2, True)


def test_a_restart_after_a_gap_is_a_new_run() -> None:
    first = _run([0.2, 0.9, 0.9, 0.9])
    second = _run([0.2, 0.9, 0.9, 0.9], offset=10)
    w = warmup_windows(frame(*first, *second)).to_pylist()
    assert [x["start_ns"] for x in w] == [T0, T0 + 10 * STEP_NS]


def test_in_windows_marks_rows() -> None:
    f = frame(*_run([0.1, 0.3, 0.9, 0.9, 0.9, 0.9]))
    flags = in_windows(f, warmup_windows(f))
    assert flags.tolist() == [True, True, False, False, False, False]
