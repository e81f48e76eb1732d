"""The time window a dashboard page shows: a named range or explicit bounds, and its step.

The step is chosen from the span so that a series has at most `points` values (server-side
downsampling), from steps that are multiples of 60 s so that long spans read the frames cache
of closed days. Windows are anchored at the newest reading (the store's, or the live state's
when it is newer), not the wall clock, so a store recorded last month still shows its last
hours.
"""

from __future__ import annotations

from dataclasses import dataclass

NS = 1_000_000_000
#: the named ranges of the time-range selector, in seconds
RANGES: dict[str, int] = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}
DEFAULT_RANGE = "6h"
DEFAULT_POINTS = 240
MIN_POINTS, MAX_POINTS = 24, 2000
#: steps a window may use (seconds): all multiples of 60 s, so the frames cache applies
STEPS_S: tuple[int, ...] = (
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
)
#: the longest span a window may cover
MAX_SPAN_S = 366 * 86400


@dataclass(frozen=True, slots=True)
class Window:
    """[start_ns, end_ns) in steps of `step_s`; `range` names the selector's choice ("" for
    explicit bounds); `latest_ns` is the newest reading the window was anchored at."""

    start_ns: int
    end_ns: int
    step_s: int
    range: str = ""
    latest_ns: int | None = None

    @property
    def span_s(self) -> float:
        return (self.end_ns - self.start_ns) / NS

    @property
    def points(self) -> int:
        return max(1, round(self.span_s / self.step_s))


@dataclass
class WindowInfo:
    """The window a page shows, and the step its series are sampled at."""

    start_ns: int
    end_ns: int
    step_s: int
    range: str
    latest_ns: int | None

    @classmethod
    def of(cls, w: Window) -> WindowInfo:
        return cls(w.start_ns, w.end_ns, w.step_s, w.range, w.latest_ns)


def choose_step(span_s: float, points: int = DEFAULT_POINTS) -> int:
    """The smallest step in STEPS_S that gives at most `points` intervals over `span_s`."""
    points = max(1, points)
    for step in STEPS_S:
        if span_s / step <= points:
            return step
    return STEPS_S[-1]


def _align_down(ns: int, step_s: int) -> int:
    return ns - ns % (step_s * NS)


def _align_up(ns: int, step_s: int) -> int:
    step_ns = step_s * NS
    return -(-ns // step_ns) * step_ns


def resolve(
    latest_ns: int | None,
    range_name: str = DEFAULT_RANGE,
    points: int = DEFAULT_POINTS,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> Window:
    """The window of a request.

    Explicit `start_ns`/`end_ns` win over the named range (a missing end is the newest reading,
    a missing start is the range before the end). ValueError names the offending value when
    the range is unknown, the bounds are reversed or the span is longer than a year.
    """
    if range_name not in RANGES:
        raise ValueError(f"range {range_name!r} is not one of {', '.join(RANGES)}")
    # an empty store: any window is empty; [0, span) keeps the arithmetic simple
    anchor = latest_ns + 1 if latest_ns is not None else RANGES[range_name] * NS
    end = end_ns if end_ns is not None else anchor
    start = start_ns if start_ns is not None else end - RANGES[range_name] * NS
    if end <= start:
        raise ValueError(
            f"the window is empty: start_ns={start} is not before end_ns={end}; "
            "give a start before the end"
        )
    span_s = (end - start) / NS
    if span_s > MAX_SPAN_S:
        raise ValueError(
            f"the window spans {span_s / 86400:.0f} days; at most {MAX_SPAN_S // 86400} days"
        )
    step = choose_step(span_s, points)
    explicit = start_ns is not None or end_ns is not None
    aligned_end = _align_up(end, step)
    aligned_start = _align_down(start, step) if explicit else aligned_end - (end - start)
    return Window(
        start_ns=max(0, aligned_start),
        end_ns=aligned_end,
        step_s=step,
        range="" if explicit else range_name,
        latest_ns=latest_ns,
    )
