"""`inference()`: a model wrapped for serving, with each call's latency recorded per engine.

    import gpulens.torch as gt
    infer = gt.inference(model, job="svc", engine="compile", data_dir="runs/")
    y = infer(x)

The calling thread takes two timestamps per call (on a GPU, two CUDA events recorded on the
current stream: nothing waits for them) and appends one small record to a queue. A writer
thread wakes every `interval_s`, reads the events the GPU has passed (`Event.query()`, never
a synchronisation), splits each engine's warm-up off (latency.py) and writes one `app` reading
per engine and window through a `SegmentWriter`, the tracker's path: the same store, labels
(job_id, run_id, source, pid, host, gpu_uuid, rank, plus `engine` and `model`) and segments.

Engines (engines.py) are built at the first call with its inputs. A build that fails (the
package is not installed, no GPU, the build's error), or a first call on the built engine that
raises, falls back to eager: an `event` row `engine_fallback` names the engine and the reason,
and the request is served by eager. A failure of gpulens itself never reaches the caller.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpulens.errors import ConfigError, StoreError
from gpulens.model import FrozenLabels, Kind, Reading, event
from gpulens.store import SegmentWriter
from gpulens.torch.device import Device, find_device
from gpulens.torch.engines import DISPLAY, EngineUnavailable, build, check_engine, detect
from gpulens.torch.latency import Call, LatencyWindow, Warmup, WarmupRule
from gpulens.torch.run import Unavailable, _config, _new_run_id, default_job, disabled

log = logging.getLogger("gpulens.torch")
MAX_PENDING = 65536  # calls waiting for the writer thread (or their GPU events), at most
DRAIN_S = 0.25  # the writer thread moves queued calls into the windows this often


@dataclass(slots=True)
class _Pending:
    engine: str
    batch: float | None
    end_ns: int
    end_perf: float  # perf_counter when the call returned
    seconds: float | None = None  # CPU: measured; GPU: read from the events
    start: Any = None
    end: Any = None


def first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    """The first tensor argument (positional, then keyword), or None."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def batch_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> float | None:
    """The first dimension of the first tensor argument (positional, then keyword)."""
    value = first_tensor(args, kwargs)
    if value is None:
        return None
    return float(value.shape[0]) if value.dim() else 1.0


class Inference:
    """A served model: call it as the model; see `inference()`."""

    def __init__(
        self,
        model: Any,
        job: str | None = None,
        engine: str | None = None,
        data_dir: str | Path | None = None,
        *,
        name: str | None = None,
        batch_size: float | None = None,
        device: str | torch.device | None = None,
        run_id: str | None = None,
        interval_s: float = 10.0,
        flush_s: float = 10.0,
        warmup: WarmupRule | None = None,
        reservoir: int = 4096,
        labels: Mapping[str, str] | None = None,
        record: bool = True,
    ) -> None:
        try:
            check_engine(engine)
        except ValueError as exc:
            raise ConfigError(f"gpulens.torch.inference: {exc}") from None
        if interval_s <= 0 or flush_s <= 0 or reservoir < 1:
            raise ConfigError(
                "gpulens.torch.inference: interval_s and flush_s must be > 0 seconds and "
                f"reservoir >= 1, got {interval_s!r}, {flush_s!r} and {reservoir!r}"
            )
        self.model = model
        self.detected = detect(model)
        self.requested = engine or self.detected
        self.engine = self.requested  # the engine serving now (eager after a fallback)
        self.job = job or default_job()
        self.run_id = run_id or _new_run_id()
        self.name = name or _model_name(model)
        self.batch_size = batch_size
        self.calls = 0
        self.readings = 0
        self.fallback_reason: str | None = None
        self._fn: Callable[..., Any] | None = None if self.requested != self.detected else model
        self._proven = self._fn is not None  # a built engine is trusted after one good call
        self._build_lock = threading.Lock()
        self._rule = warmup or WarmupRule()
        self._reservoir = reservoir
        self._pending: deque[_Pending] = deque()
        self._dropped = 0
        self._warmups: dict[str, Warmup] = {}
        self._windows: dict[str, LatencyWindow] = {}
        self._window_start: float | None = None
        self._dead = not record
        self._closed = False
        self._stop = threading.Event()
        self._writer: SegmentWriter | None = None
        self.device: Device = find_device(model if isinstance(model, torch.nn.Module) else None,
                                          device)  # fmt: skip
        self._parameters = _parameters(model)
        if not record:
            return
        cfg = _config(data_dir)
        self.data_dir = cfg.data_dir
        self.host = str(cfg.get("host") or socket.gethostname())
        self.interval_s = interval_s
        self._base = self._labels(labels)
        self._writer = SegmentWriter(self.data_dir, self.host, flush_seconds=flush_s)
        self._thread = threading.Thread(target=self._loop, name="gpulens-inference", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _labels(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        out = {
            "host": self.host,
            "pid": str(os.getpid()),
            "job_id": self.job,
            "run_id": self.run_id,
            "source": "gpulens.torch.inference",
            "device": self.device.name,
            "model": self.name,
        }
        if self.device.uuid:
            out["gpu_uuid"] = self.device.uuid
        if self.device.model:
            out["gpu_model"] = self.device.model
        rank = os.environ.get("RANK")
        if rank is not None:
            out["rank"] = rank
        out.update(extra or {})
        return out

    # -- the calling thread ----------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = self._fn if self._fn is not None else self._built(args, kwargs)
        if not self._proven:
            return self._first_call(fn, args, kwargs)
        if self._dead:
            return fn(*args, **kwargs)
        return self._timed(fn, self.engine, args, kwargs)

    def _timed(self, fn: Callable[..., Any], engine: str, args: Any, kwargs: Any) -> Any:
        tensor = first_tensor(args, kwargs)
        batch = self.batch_size
        if batch is None and tensor is not None:
            batch = float(tensor.shape[0]) if tensor.dim() else 1.0
        # CUDA events when the model or the call's first tensor is on a GPU
        if self.device.cuda or (tensor is not None and tensor.is_cuda):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            out = fn(*args, **kwargs)
            end.record()
            self._push(
                _Pending(engine, batch, time.time_ns(), time.perf_counter(), None, start, end)
            )
            return out
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        t1 = time.perf_counter()
        self._push(_Pending(engine, batch, time.time_ns(), t1, t1 - t0))
        return out

    def _push(self, call: _Pending) -> None:
        self.calls += 1
        if len(self._pending) >= MAX_PENDING:
            self._pending.popleft()
            self._dropped += 1
        self._pending.append(call)

    def _built(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., Any]:
        with self._build_lock:
            if self._fn is not None:
                return self._fn
            t0 = time.perf_counter()
            try:
                fn = build(self.model, self.requested, args, kwargs)
            except EngineUnavailable as exc:
                return self._fall_back(str(exc))
            except Exception as exc:  # a build error of the engine's own
                return self._fall_back(f"{type(exc).__name__}: {exc}")
            seconds = time.perf_counter() - t0
            if self.requested in ("tensorrt", "onnxruntime"):
                self._event(
                    "engine_build",
                    f"{DISPLAY[self.requested]} engine built in {seconds:.3g} s",
                    self.requested,
                )
            self._fn = fn
            return fn

    def _first_call(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """A built engine's first call: an error there (torch.compile compiles now) falls back
        to eager, which serves the request; an error of eager itself is the caller's."""
        if fn is self.model:
            self._proven = True
            return self(*args, **kwargs)
        try:
            timed = not self._dead
            out = self._timed(fn, self.engine, args, kwargs) if timed else fn(*args, **kwargs)
        except Exception as exc:
            with self._build_lock:
                self._fall_back(f"its first call failed: {type(exc).__name__}: {exc}")
            return self(*args, **kwargs)
        self._proven = True
        return out

    def _fall_back(self, reason: str) -> Callable[..., Any]:
        name = DISPLAY.get(self.requested, self.requested)
        self.fallback_reason = reason
        self.engine = self.detected if self.detected != self.requested else "eager"
        self._fn = self.model
        self._proven = True
        log.warning("gpulens: %s unavailable for job %r, serving on %s: %s",
                    name, self.job, self.engine, reason)  # fmt: skip
        self._event(
            "engine_fallback",
            f"{name} unavailable: {reason}; serving on {DISPLAY.get(self.engine, self.engine)}",
            self.requested,
        )
        return self.model  # type: ignore[no-any-return]

    def _event(self, name: str, message: str, engine: str) -> None:
        if self._writer is None or self._dead:
            return
        labels = {**self._base, "engine": engine}
        try:
            self._writer.append([event(time.time_ns(), name, message, labels)])
        except Exception as exc:
            self._fail(exc)

    # -- the writer thread -----------------------------------------------------------------

    def _loop(self) -> None:
        """Drain the queue every DRAIN_S (so it stays short at any request rate) and write
        the windows every `interval_s`."""
        next_write = time.monotonic() + self.interval_s
        while not self._stop.wait(min(self.interval_s, DRAIN_S)):
            if self._dead:
                return
            due = time.monotonic() >= next_write
            if due:
                next_write = time.monotonic() + self.interval_s
            self._emit(write=due)

    def _resolved(self) -> list[_Pending]:
        """The queued calls whose latency is known (on a GPU: whose end event has passed)."""
        out: list[_Pending] = []
        while self._pending:
            call = self._pending[0]
            if call.seconds is None:
                if not call.end.query():
                    break
                call.seconds = call.start.elapsed_time(call.end) / 1e3
                call.start = call.end = None
            out.append(self._pending.popleft())
        return out

    def _emit(self, final: bool = False, write: bool = True) -> None:
        try:
            for p in self._resolved():
                assert p.seconds is not None
                if self._window_start is None:  # the window starts with its first call
                    self._window_start = p.end_perf - p.seconds
                warmup = self._warmups.setdefault(p.engine, Warmup(self._rule))
                window = self._windows.setdefault(p.engine, LatencyWindow(self._reservoir))
                settled = warmup.settled
                warm, steady = warmup.add(Call(p.seconds, p.batch, p.end_ns))
                for c in warm:
                    window.add_warmup(c)
                for c in steady:
                    window.add(c)
                if warmup.settled and not settled:
                    self._warmup_ended(p.engine, warmup)
            if final:  # calls still held: the engine never settled, they count as warm-up
                for engine, warmup in self._warmups.items():
                    window = self._windows.setdefault(engine, LatencyWindow(self._reservoir))
                    for c in warmup.held:
                        window.add_warmup(c)
                    warmup.held = []
            if write:
                self._write(time.perf_counter())
        except Exception as exc:
            self._fail(exc)

    def _warmup_ended(self, engine: str, warmup: Warmup) -> None:
        level = warmup.level_s or 0.0
        self._event(
            "warmup_end",
            f"{DISPLAY.get(engine, engine)} warm-up ended after {warmup.warmup_calls} call(s) "
            f"({warmup.warmup_seconds:.3g} s); steady median {level * 1e3:.3g} ms",
            engine,
        )

    def _write(self, now: float) -> None:
        if self._window_start is None or self._writer is None:
            return
        window_s = now - self._window_start
        ts = time.time_ns()
        readings = []
        for engine, window in self._windows.items():
            values = window.values(window_s)
            if not values:
                continue
            if self._parameters is not None:
                values["app_model_parameters"] = self._parameters
            labels = FrozenLabels({**self._base, "engine": engine})
            readings.append(Reading(Kind.APP, ts, labels, values))
        self._windows = {}
        self._window_start = now
        if not readings:
            return
        self._writer.append(readings)
        self.readings += len(readings)
        if self._writer.flush_due(ts):
            try:
                self._writer.flush()
            except StoreError as exc:
                log.warning("gpulens: cannot write the latency readings yet (retrying): %s", exc)

    def _fail(self, exc: BaseException) -> None:
        if self._dead:
            return
        self._dead = True
        log.warning(
            "gpulens: latency recording of job %r stopped after an error; serving goes on: "
            "%s: %s",
            self.job, type(exc).__name__, exc,
        )  # fmt: skip

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write the last window and flush (idempotent). The wrapper still serves after it."""
        if self._closed or self._writer is None:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)
        try:
            if not self._dead:
                for p in list(self._pending):  # the last calls' events: waited for once, here
                    if p.end is not None:
                        p.end.synchronize()
                self._emit(final=True)
            self._dead = True
            self._writer.close()
        except StoreError as exc:
            log.warning("gpulens: the last latency readings were not stored: %s", exc)
        except Exception as exc:  # recording never raises into the serving code
            self._dead = True
            log.warning("gpulens: the last latency readings were not stored: %s: %s",
                        type(exc).__name__, exc)  # fmt: skip

    def __enter__(self) -> Inference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _model_name(model: Any) -> str:
    inner = getattr(model, "_orig_mod", model)
    return type(inner).__name__ if not callable(inner) or hasattr(inner, "__dict__") else "model"


def _parameters(model: Any) -> float | None:
    inner = getattr(model, "_orig_mod", model)
    if isinstance(inner, torch.nn.Module):
        return float(sum(p.numel() for p in inner.parameters()))
    return None


def inference(
    model: Any,
    job: str | None = None,
    engine: str | None = None,
    data_dir: str | Path | None = None,
    **options: Any,
) -> Inference:
    """Wrap `model` for serving: a callable that runs it on `engine` and records each call.

    `engine`: "eager", "compile", "tensorrt", "onnxruntime" (built at the first call; eager
    when it cannot be built, with an `engine_fallback` event), or None: the engine `model`
    already is (detected). `job` / `data_dir` as for `track()`. Options: `name` (the `model`
    label, default the module's class name), `batch_size` (declared; default the first
    dimension of the first tensor argument), `device`, `run_id`, `interval_s` (seconds per
    reading, 10), `flush_s` (10), `warmup` (a `WarmupRule`), `reservoir` (latencies kept per
    window, 4096), `labels`. With GPULENS_DISABLE=1 the engine is still built (and still falls
    back), and nothing is recorded.
    """
    if disabled():
        return Inference(model, job, engine, data_dir, record=False, **options)
    try:
        return Inference(model, job, engine, data_dir, **options)
    except Unavailable as exc:
        log.warning("gpulens: not recording latencies (serving goes on): %s", exc)
        return Inference(model, job, engine, data_dir, record=False, **options)
