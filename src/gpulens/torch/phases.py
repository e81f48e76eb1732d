"""Forward, backward and optimizer time from module and optimizer hooks.

Four marks per step: forward start and end (hooks on the model's root module), optimizer start
and end (the optimizer's step hooks). Forward is each forward's span; backward is from the end
of a forward to the next forward or optimizer start (the loss and its backward); optimizer is
the optimizer step. On a GPU a mark is a CUDA event recorded on the current stream: recording
adds no synchronisation, and the spans are read later, once the GPU has passed the events
(`Event.query()`), never by waiting. On the CPU a mark is `time.perf_counter()`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

FWD_START, FWD_END, OPT_START, OPT_END = 0, 1, 2, 3
MAX_PENDING = 256  # GPU steps whose events are not read yet (older ones are dropped)

Mark = tuple[int, Any]  # (kind, perf_counter seconds or torch.cuda.Event)


def spans(marks: list[tuple[int, float]]) -> tuple[float, float, float | None]:
    """(forward, backward, optimizer) seconds from one step's marks in time order.

    When forwards run inside the optimizer step (a closure, as Lightning's automatic
    optimization does), the update cannot be told from the backward: the time from the last
    forward's end to the optimizer's end counts as backward, and optimizer is None."""
    forward = backward = optimizer = 0.0
    fwd_start: float | None = None
    fwd_end: float | None = None
    opt_start: float | None = None
    closure = False
    for kind, t in marks:
        if kind == FWD_START:
            if fwd_end is not None:
                backward += t - fwd_end
                fwd_end = None
            fwd_start = t
            closure = closure or opt_start is not None
        elif kind == FWD_END and fwd_start is not None:
            forward += t - fwd_start
            fwd_start, fwd_end = None, t
        elif kind == OPT_START:
            if fwd_end is not None:
                backward += t - fwd_end
                fwd_end = None
            opt_start = t
        elif kind == OPT_END and opt_start is not None:
            if fwd_end is not None and opt_start < fwd_end:  # forward and backward inside
                backward += t - fwd_end
                fwd_end = None
            else:
                optimizer += t - opt_start
            opt_start = None
    return forward, backward, (None if closure else optimizer)


class PhaseTimer:
    """Hooks on `model` and `optimizer` that mark each phase; `end_step()` closes a step.

    `cuda`: mark with CUDA events (on the model's device) instead of perf_counter.
    `on_error` is called with any exception a hook raises; the hook then does nothing more.
    """

    def __init__(
        self,
        model: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        cuda: bool,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.cuda = cuda
        self._on_error = on_error
        self._marks: list[Mark] = []
        self._pending: deque[list[Mark]] = deque()
        self._done: deque[tuple[float, float, float | None]] = deque()
        self._pool: list[Any] = []
        self._handles: list[Any] = []
        self.active = False
        if model is not None:
            self._handles.append(model.register_forward_pre_hook(self._mark_fwd_start))
            self._handles.append(model.register_forward_hook(self._mark_fwd_end))
            self.active = True
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._mark_opt_start))
            self._handles.append(optimizer.register_step_post_hook(self._mark_opt_end))
            self.active = True

    def event(self) -> Any:
        """A recorded CUDA event (from the pool of read ones)."""
        event = self._pool.pop() if self._pool else _new_event()
        event.record()
        return event

    def release(self, event: Any) -> None:
        """Give a read event back to the pool."""
        self._pool.append(event)

    def _mark(self, kind: int) -> None:
        try:
            if self.cuda:
                event = self.event()
                self._marks.append((kind, event))
            else:
                self._marks.append((kind, time.perf_counter()))
        except Exception as exc:  # a hook never breaks the step
            self.remove()
            self._on_error(exc)

    def _mark_fwd_start(self, *_: Any) -> None:
        self._mark(FWD_START)

    def _mark_fwd_end(self, *_: Any) -> None:
        self._mark(FWD_END)

    def _mark_opt_start(self, *_: Any) -> None:
        self._mark(OPT_START)

    def _mark_opt_end(self, *_: Any) -> None:
        self._mark(OPT_END)

    def end_step(self) -> None:
        """Close the current step (training thread): CPU spans now, GPU ones when readable."""
        marks, self._marks = self._marks, []
        if not marks:
            return
        if not self.cuda:
            self._done.append(spans(marks))
            return
        self._pending.append(marks)
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft()

    def collect(self) -> list[tuple[float, float, float | None]]:
        """The (forward, backward, optimizer) spans of the steps readable now, oldest first:
        every closed CPU step, and GPU steps whose last event the GPU has passed."""
        out: list[tuple[float, float, float | None]] = []
        while self._done:
            out.append(self._done.popleft())
        while self._pending:
            marks = self._pending[0]
            if not marks[-1][1].query():  # not reached yet: later steps are not either
                break
            self._pending.popleft()
            first = marks[0][1]
            timed = [(kind, first.elapsed_time(ev) / 1e3) for kind, ev in marks]
            out.append(spans(timed))
            self._pool.extend(ev for _, ev in marks)
        return out

    def remove(self) -> None:
        """Take the hooks off the model and optimizer."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.active = False


def _new_event() -> Any:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
