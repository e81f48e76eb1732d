"""`track()`: the tracker of one training run, and the `Run` it hands the training loop.

The training thread only takes timestamps and appends one small record per step to a queue
(`step()`), plus the module/optimizer hook marks when a model or optimizer is given. A writer
thread wakes every `interval_s`, turns the queued steps into one `app` reading (window.py)
with the phase times, memory and DataLoader worker load, and appends it to a `SegmentWriter`
that flushes every `flush_s`: the same store, schema and segments as every other writer.

A failure never reaches the training loop: the first one is logged (logger "gpulens.torch")
and the tracker goes quiet (a store that cannot be written is logged once and retried, its rows
kept within the writer's bound). With GPULENS_DISABLE=1, `track()` returns a run that does
nothing: `wrap()` hands back the loader itself, no hook, thread or file is made.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import torch

from gpulens.collect.procs.parse import environ_labels, parse_environ
from gpulens.config import Config, load_config
from gpulens.errors import ConfigError, GpulensError, StoreError
from gpulens.model import FrozenLabels, Kind, Reading, event
from gpulens.store import SegmentWriter
from gpulens.torch.device import Device, find_device, memory_values
from gpulens.torch.flops import FlopCount, peak_flops, precision_of
from gpulens.torch.loader import WorkerCpu, Wrapped, worker_pids
from gpulens.torch.phases import PhaseTimer
from gpulens.torch.profile_on_demand import OnDemand
from gpulens.torch.window import Step, Window

T = TypeVar("T")
log = logging.getLogger("gpulens.torch")

ENV_DISABLE = "GPULENS_DISABLE"
ENV_JOB = "GPULENS_JOB"
ENV_RUN = "GPULENS_RUN"
MAX_STEP_EVENTS = 4096  # step-end CUDA events waiting to be read, at most


def disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when GPULENS_DISABLE is set to 1 / true / yes / on."""
    value = (os.environ if env is None else env).get(ENV_DISABLE, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


def default_job(env: Mapping[str, str] | None = None) -> str:
    """The job the agent would attribute this process to from its environment (GPULENS_LABELS
    job_id, GPULENS_JOB, Slurm's job id), else the script's name."""
    explicit, slurm = environ_labels(os.environ if env is None else env)
    job = explicit.get("job_id") or slurm.get("job_id")
    if job:
        return job
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    return script if script and script not in {"-c", "-m"} else "python"


def start_environ_job(pid: int | str = "self", proc_root: Path = Path("/proc")) -> str | None:
    """The job the agent reads for a process (this one by default): from the environment it
    was started with (/proc/<pid>/environ; a later os.environ change does not show there).
    None when none is there or it cannot be read."""
    try:
        data = (proc_root / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    explicit, slurm = environ_labels(parse_environ(data))
    return explicit.get("job_id") or slurm.get("job_id")


class Run:
    """One tracked training run: `wrap()` the loader, call `step()` after each step."""

    def __init__(
        self,
        job: str | None = None,
        data_dir: str | Path | None = None,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        run_id: str | None = None,
        device: str | torch.device | None = None,
        dtype: str | None = None,
        interval_s: float = 5.0,
        flush_s: float = 10.0,
        count_flops_at: int = 2,
        source: str = "gpulens.torch",
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if interval_s <= 0 or flush_s <= 0:
            raise ConfigError(
                f"interval_s and flush_s must be > 0 seconds, got {interval_s!r} and {flush_s!r}"
            )
        try:
            self._flops = FlopCount(count_flops_at)
            precision = precision_of(model, dtype)
        except ValueError as exc:
            raise ConfigError(f"gpulens.torch.track: {exc}") from None
        self.job = job or default_job()
        self.run_id = run_id or os.environ.get(ENV_RUN) or _new_run_id()
        cfg = _config(data_dir)
        self.data_dir = cfg.data_dir
        self.host = str(cfg.get("host") or socket.gethostname())
        self.interval_s = interval_s
        self.device: Device = find_device(model, device)
        self.precision = precision
        self.peak_flops = peak_flops(self.device.model, precision) if self.device.cuda else None
        self.labels = FrozenLabels(self._labels(source, labels))
        self.steps = 0
        self.readings = 0
        self._dead = False
        self._failed_once = False
        self._queue: deque[Step] = deque()
        self._window = Window()  # the writer thread's window being filled
        self._step_events: deque[Any] = deque()  # CUDA events at step ends, not yet read
        self._last_event: Any = None
        self._wait = 0.0
        self._mark = time.perf_counter()
        self._fetched = False
        self._cpu = WorkerCpu()
        self._phases = PhaseTimer(model, optimizer, self.device.cuda, self._fail)
        self._writer = SegmentWriter(self.data_dir, self.labels["host"], flush_seconds=flush_s)
        self._stop = threading.Event()
        self._closed = False
        self._check_join()
        self._flops.step_ended(0)
        self.profile = OnDemand(
            self.data_dir, self.job, self.run_id, dict(self.labels), self.device.cuda,
            int(cfg.get("profile.steps")), self._event,
        )  # fmt: skip
        self.profile.install_signal()
        self._thread = threading.Thread(target=self._loop, name="gpulens-torch", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _labels(self, source: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        out = {
            "host": self.host,
            "pid": str(os.getpid()),
            "job_id": self.job,
            "run_id": self.run_id,
            "source": source,
            "device": self.device.name,
        }
        if self.device.uuid:
            out["gpu_uuid"] = self.device.uuid
        if self.device.model:
            out["gpu_model"] = self.device.model
        if self.precision:
            out["precision"] = self.precision
        rank = os.environ.get("RANK")
        if rank is not None:
            out["rank"] = rank
        out.update(extra or {})
        return out

    def _check_join(self) -> None:
        """Say once when the agent cannot attribute this process to the run's job."""
        os.environ.setdefault(ENV_JOB, self.job)  # processes started from here carry it
        seen = start_environ_job()
        if seen is not None and seen != self.job:
            log.warning(
                "gpulens: this process started with job %r in its environment, the tracker "
                "records job %r: GPU telemetry of this process is attributed to %r. Start it "
                "with GPULENS_JOB=%s to join them.",
                seen, self.job, seen, self.job,
            )  # fmt: skip
        elif seen is None and sys.platform.startswith("linux"):
            log.info(
                "gpulens: start this process with GPULENS_JOB=%s in its environment for the "
                "gpulens agent to attribute its GPU time to that job",
                self.job,
            )

    # -- the training thread ---------------------------------------------------------------

    def wrap(self, loader: Iterable[T]) -> Iterable[T]:
        """The loader, iterated with the time blocked in each `next()` recorded as data wait."""
        if self._dead:
            return loader
        return Wrapped(loader, self._waited, self._new_iterator)

    def _waited(self, start: float, seconds: float) -> None:
        if not self._fetched:  # the first step starts with its first fetch
            self._fetched = True
            self._mark = start
        self._wait += seconds

    def _new_iterator(self, iterator: Any) -> None:
        try:
            self._cpu.watch(worker_pids(iterator))
        except Exception as exc:
            self._fail(exc)

    def batch_arrived(self) -> None:
        """For loops that do not go through `wrap()` (the framework callbacks): the time since
        the last step ended counts as data wait."""
        if self._dead:
            return
        self._fetched = True
        self._wait += time.perf_counter() - self._mark

    def step(self, samples: float | None = None, tokens: float | None = None) -> None:
        """End of one training step: `samples` and `tokens` it processed, when known."""
        if self._dead:
            return
        now = time.perf_counter()
        try:
            self._queue.append(Step(now - self._mark, self._wait, samples, tokens))
            self._wait = 0.0
            self._mark = now
            self.steps += 1
            if self._phases.active:
                self._phases.end_step()
            if self.device.cuda:
                self._step_events.append(self._phases.event())
            if self._flops.flops is None:
                self._flops.step_ended(self.steps)
            if self.profile.busy:
                self.profile.step_ended(self.steps)
        except Exception as exc:
            self._fail(exc)

    def restart_clock(self) -> None:
        """Start the next step's time now (after an evaluation or a pause between epochs)."""
        self._mark = time.perf_counter()
        self._wait = 0.0

    @property
    def step_flops(self) -> float | None:
        """Model FLOPs of one step, once counted."""
        return self._flops.flops

    # -- the writer thread -----------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._dead:
                return
            self._emit()
            try:
                self.profile.poll()
            except Exception as exc:
                self._fail(exc)

    def _event(self, name: str, message: str) -> None:
        """An event row of this run (profile captured...)."""
        try:
            self._writer.append([event(time.time_ns(), name, message, self.labels)])
        except Exception as exc:
            self._fail(exc)

    def _emit(self) -> None:
        try:
            window = self._window  # phase and GPU times read while no step ended stay in it
            while self._queue:
                window.add(self._queue.popleft())
            for forward, backward, optimizer in self._phases.collect():
                window.add_phases(forward, backward, optimizer)
            if self.device.cuda:
                window.add_gpu_steps(*self._gpu_steps())
            values = window.values(self._flops.flops, self.peak_flops)
            if not values:
                return
            self._window = Window()
            values.update(memory_values(self.device))
            values.update(self._cpu.sample())
            self._writer.append([Reading(Kind.APP, time.time_ns(), self.labels, values)])
            self.readings += 1
            if self._writer.flush_due(time.time_ns()):
                self._flush()
        except Exception as exc:
            self._fail(exc)

    def _gpu_steps(self) -> tuple[float, int]:
        """(seconds, steps) of GPU time between the step ends the GPU has passed."""
        seconds, steps = 0.0, 0
        while len(self._step_events) > MAX_STEP_EVENTS:  # a GPU that never gets there
            self._phases.release(self._step_events.popleft())
            self._last_event = None
        while self._step_events and self._step_events[0].query():
            event = self._step_events.popleft()
            if self._last_event is not None:
                seconds += self._last_event.elapsed_time(event) / 1e3
                steps += 1
                self._phases.release(self._last_event)
            self._last_event = event
        return seconds, steps

    def _flush(self) -> None:
        try:
            self._writer.flush()
        except StoreError as exc:  # kept buffered, retried next time: say it once
            if not self._failed_once:
                self._failed_once = True
                log.warning("gpulens: cannot write the run's readings yet (retrying): %s", exc)

    def _fail(self, exc: BaseException) -> None:
        if self._dead:
            return
        self._dead = True
        log.warning(
            "gpulens: the tracker of job %r stopped recording after an error; training goes "
            "on: %s: %s",
            self.job, type(exc).__name__, exc,
        )  # fmt: skip
        try:
            self._phases.remove()
        except Exception:
            log.debug("gpulens: removing the hooks failed", exc_info=True)

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop, write the last window and flush (idempotent)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        self._flops.abandon()
        self.profile.abandon()
        try:
            self._phases.remove()
        except Exception:
            log.debug("gpulens: removing the hooks failed", exc_info=True)
        if not self._dead:
            self._emit()
        try:
            self._writer.close()
        except StoreError as exc:
            log.warning("gpulens: the run's last readings were not stored: %s", exc)
        except Exception as exc:
            self._fail(exc)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullRun:
    """What `track()` returns with GPULENS_DISABLE=1: every call does nothing."""

    job = run_id = ""
    steps = readings = 0
    step_flops = None

    def wrap(self, loader: Iterable[T]) -> Iterable[T]:
        return loader

    def batch_arrived(self) -> None:
        return None

    def step(self, samples: float | None = None, tokens: float | None = None) -> None:
        return None

    def restart_clock(self) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> NullRun:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def start(
    job: str | None = None,
    data_dir: str | Path | None = None,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    **options: Any,
) -> Run | NullRun:
    """A started run (call `close()` at the end), or a NullRun with GPULENS_DISABLE=1.
    The callbacks use this; scripts use `track()`."""
    if disabled():
        return NullRun()
    try:
        return Run(job, data_dir, model, optimizer, **options)
    except Unavailable as exc:
        log.warning("gpulens: not tracking this run (training goes on): %s", exc)
        return NullRun()


@contextmanager
def track(
    job: str | None = None,
    data_dir: str | Path | None = None,
    model: torch.nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    **options: Any,
) -> Iterator[Run | NullRun]:
    """Track a training run: `with track(job=..., data_dir=...) as run:`.

    `job`: the job its readings (and, through GPULENS_JOB, the agent's view of this process)
    carry; default: what the environment says (GPULENS_JOB, Slurm), else the script's name.
    `data_dir`: the store to write to, ideally the agent's (default: GPULENS_DATA_DIR, else
    gpulens' default data directory). `model` / `optimizer`: time forward, backward and the
    optimizer step. Options: `run_id`, `device`, `dtype` (the precision the MFU peak is taken
    at: bf16, fp16, tf32, fp8, fp32, fp64; default from the model's parameters), `interval_s`
    (seconds per reading, 5), `flush_s` (seconds between store flushes, 10), `count_flops_at`
    (the step whose FLOPs are counted, 2), `labels` (extra labels on the readings).
    """
    run = start(job, data_dir, model, optimizer, **options)
    try:
        yield run
    finally:
        run.close()


def _new_run_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return os.environ.get("TORCHELASTIC_RUN_ID") or f"{stamp}-{os.getpid()}"


class Unavailable(Exception):
    """The tracker cannot start here (its configuration or store): the run is not tracked."""


def _config(data_dir: str | Path | None) -> Config:
    """The settings with `data_dir` (a path, or an object-store URL with the store.* settings)
    or, without it, the data_dir setting (GPULENS_DATA_DIR, else gpulens' default): the
    agent's store, and the host name the agent writes."""
    overrides = {"data_dir": str(data_dir)} if data_dir is not None else None
    try:
        cfg = load_config(overrides=overrides)
        cfg.data_dir  # noqa: B018  (opens an object-store location: fails here, not later)
    except GpulensError as exc:
        raise Unavailable(str(exc)) from exc
    return cfg
