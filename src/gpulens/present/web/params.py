"""Query parameters shared by the API and the pages, validated by FastAPI (bad values → 422
with the parameter named) and turned into a dashboard window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import HTTPException, Query, Request

from gpulens.findings.engine import RULES
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.dashboard.window import (
    DEFAULT_POINTS,
    MAX_POINTS,
    MAX_SPAN_S,
    MIN_POINTS,
    RANGES,
    Window,
)

RangeName = Literal["1h", "6h", "24h", "7d"]
Severity = Literal["critical", "warning", "info"]
FairnessBy = Literal["user", "team", "project"]
RULE_PATTERN = "^(" + "|".join(RULES) + ")$"  # a finding rule's id
NS = 1_000_000_000
#: the latest instant a bound may name (2100-01-01 in ns): keeps arithmetic inside int64
MAX_NS = 4_102_444_800 * NS


@dataclass(frozen=True)
class WindowQuery:
    """The time-range parameters of a request."""

    range: str
    points: int
    start_ns: int | None
    end_ns: int | None


def window_query(
    range_: Annotated[
        RangeName,
        Query(alias="range", description="Time range ending at the newest reading."),
    ] = "6h",
    points: Annotated[
        int,
        Query(ge=MIN_POINTS, le=MAX_POINTS, description="Most points per series (sets the step)."),
    ] = DEFAULT_POINTS,
    start_ns: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_NS,
            description="Window start, ns since the epoch; without end_ns the window is `range` "
            "long from it.",
        ),
    ] = None,
    end_ns: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_NS,
            description="Window end, ns since the epoch; without start_ns the window is `range` "
            f"long up to it. With both, the end must follow the start by at most "
            f"{MAX_SPAN_S // 86400} days (else 422).",
        ),
    ] = None,
) -> WindowQuery:
    if start_ns is not None and end_ns is None:  # any start alone makes a window
        end_ns = start_ns + RANGES[range_] * NS
    return WindowQuery(range_, points, start_ns, end_ns)


def dashboard(request: Request) -> Dashboard:
    result: Dashboard = request.app.state.dashboard
    return result


def resolve_window(dash: Dashboard, q: WindowQuery) -> Window:
    """The window of `q`; 422 naming the problem when the bounds make no window."""
    try:
        return dash.window(q.range, q.points, q.start_ns, q.end_ns)
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
