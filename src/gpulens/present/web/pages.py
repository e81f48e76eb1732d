"""The dashboard's HTML pages: each renders one dashboard view model with a template and hands
its plotly figures (web/charts.py) to static/app.js; `/charts/...` serves the same figures
for the pages' periodic refresh."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape

from gpulens.errors import TraceFormatError
from gpulens.present import format as human
from gpulens.present.dashboard import RANGES, TracePathError, UnknownGpu
from gpulens.present.dashboard.people import FAIRNESS_BY
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.dashboard.window import DEFAULT_RANGE, Window
from gpulens.present.web import charts
from gpulens.present.web.api import trace_error
from gpulens.present.web.params import (
    FairnessBy,
    Severity,
    WindowQuery,
    dashboard,
    resolve_window,
    window_query,
)

TEMPLATES = Path(__file__).parent / "templates"
NAV: tuple[tuple[str, str, str], ...] = (
    ("fleet", "/", "Fleet"),
    ("cluster", "/cluster", "Cluster"),
    ("gpus", "/gpus", "GPUs"),
    ("workloads", "/workloads", "Workloads"),
    ("people", "/people", "Jobs and users"),
    ("findings", "/findings", "Findings"),
    ("traces", "/traces", "Traces"),
)
NOW_EVERY_S = 5
REFRESH_EVERY_S = 60

router = APIRouter(include_in_schema=False)
Dash = Annotated[Dashboard, Depends(dashboard)]
Win = Annotated[WindowQuery, Depends(window_query)]


# -- formatting (templates only format; every figure comes from the view models) ---------------


def _missing(x: Any) -> bool:
    return x is None or isinstance(x, Undefined)


def _num(x: Any, sig: int = human.SIG) -> str:
    return "–" if _missing(x) else human.number(x, sig)


def _metric(x: Any, metric: str) -> str:
    """A value of the metric (or evidence row) called `metric`, in its unit: `64.4 GB`."""
    return "–" if _missing(x) else human.metric_value(metric, x)


def _readable(text: Any) -> str:
    return human.readable(str(text))


def _pct(x: Any) -> str:
    return "–" if _missing(x) else f"{100 * x:.0f}%"


def _money(x: Any, currency: str = "USD") -> str:
    return "–" if _missing(x) else human.money(x, currency)


def _ts(ns: Any, seconds: bool = False) -> str:
    if _missing(ns):
        return "–"
    fmt = "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    return datetime.fromtimestamp(int(ns) / 1e9, UTC).strftime(fmt)


def _duration(seconds: Any) -> str:
    return "–" if _missing(seconds) else human.duration(float(seconds))


def _filesize(n: Any) -> str:
    return "–" if _missing(n) else human.size(float(n))


_SUBJECT_KEYS = ("job_id", "user", "engine", "host", "gpu_index", "trace", "rank", "event")


def _subject(subject: Mapping[str, Any]) -> str:
    keys = [k for k in _SUBJECT_KEYS if k in subject] or list(subject)[:4]
    return human.readable(", ".join(f"{k}={subject[k]}" for k in keys))


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=_num,
        pct=_pct,
        money=_money,
        ts=_ts,
        duration=_duration,
        filesize=_filesize,
        metric=_metric,
        readable=_readable,
    )
    env.globals.update(
        nav=NAV,
        ranges=list(RANGES),
        subject=_subject,
        fairness_by=FAIRNESS_BY,
        default_range=DEFAULT_RANGE,
    )
    return env


ENV = environment()


def _query_builder(request: Request) -> Callable[..., str]:
    def with_query(path: str | None = None, **changes: Any) -> str:
        params = dict(request.query_params)
        params.pop("token", None)
        for key, value in changes.items():
            if value is None:
                params.pop(key, None)
            else:
                params[key] = str(value)
        query = urlencode(params)
        return (path or request.url.path) + (f"?{query}" if query else "")

    return with_query


def _gpu_href(request: Request) -> Callable[..., str]:
    keep = {k: v for k, v in request.query_params.items() if k in ("range", "points")}

    def gpu_href(uuid: str, start_ns: int | None = None, end_ns: int | None = None) -> str:
        params = dict(keep)
        if start_ns is not None and end_ns is not None:
            params = {"start_ns": str(start_ns), "end_ns": str(end_ns)}
        query = urlencode(params)
        return f"/gpus/{quote(uuid, safe='')}" + (f"?{query}" if query else "")

    return gpu_href


def render(
    request: Request,
    template: str,
    *,
    active: str,
    title: str,
    figures: Mapping[str, Any] | None = None,
    window: Window | None = None,
    refresh: str | None = None,
    status: int = 200,
    always_refresh: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A page: the template, its figures for app.js, and the refresh URL of a relative range
    (or of any page whose source moves on by itself, with `always_refresh`)."""
    page_data = {
        "figures": figures or {},
        "refresh": refresh if always_refresh or (window is not None and window.range) else None,
        "now_every_s": NOW_EVERY_S,
        "refresh_every_s": REFRESH_EVERY_S,
        # `agent --no-collect`: nothing live here by design, not a stopped agent
        "collecting": getattr(getattr(request.app.state, "ctx", None), "collecting", True),
    }
    html = ENV.get_template(template).render(
        request=request,
        active=active,
        title=title,
        window=window,
        page_data=page_data,
        with_query=_query_builder(request),
        gpu_href=_gpu_href(request),
        notes=context.pop("notes", []),
        **context,
    )
    return HTMLResponse(html, status_code=status)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return render(
        request,
        "error.html",
        active="",
        title=str(status),
        status=status,
        code=status,
        message=message,
    )


def _charts_url(request: Request) -> str:
    query = request.url.query
    return "/charts" + request.url.path.rstrip("/") + (f"?{query}" if query else "")


# -- pages -------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
def fleet(request: Request, dash: Dash, q: Win) -> Response:
    if not dash.ctx.collecting:  # `agent --no-collect`: the cluster is all there is
        return RedirectResponse("/cluster" + _query(request), 303)
    w = resolve_window(dash, q)
    page = dash.fleet(w)
    return render(
        request,
        "fleet.html",
        active="fleet",
        title="Fleet",
        window=w,
        page=page,
        figures=charts.fleet_figures(page),
        refresh="/charts/fleet" + _query(request),
        notes=page.notes,
    )


@router.get("/fleet", response_class=RedirectResponse)
def fleet_alias(request: Request) -> RedirectResponse:
    return RedirectResponse("/" + _query(request))


HeatMetric = Literal["useful", "duty"]


@router.get("/cluster", response_class=HTMLResponse)
def cluster(request: Request, dash: Dash, q: Win, heat: HeatMetric | None = None) -> HTMLResponse:
    from_prometheus = dash.cluster_from_prometheus()
    w = None if from_prometheus else resolve_window(dash, q)
    page = dash.cluster(w)
    return render(
        request,
        "cluster.html",
        active="cluster",
        title="Cluster",
        window=w,
        page=page,
        heat=heat or page.heat.metric,
        currency=page.currency,
        figures=charts.cluster_figures(page, heat),
        refresh=_charts_url(request),
        always_refresh=from_prometheus,
        notes=page.notes,
    )


@router.get("/gpus", response_class=HTMLResponse)
def gpus(request: Request, dash: Dash) -> HTMLResponse:
    return render(request, "gpus.html", active="gpus", title="GPUs", gpus=dash.gpus())


@router.get("/gpus/{gpu_uuid}", response_class=HTMLResponse)
def gpu(request: Request, dash: Dash, gpu_uuid: str, q: Win) -> HTMLResponse:
    w = resolve_window(dash, q)
    try:
        page = dash.gpu(gpu_uuid, w)
    except UnknownGpu as exc:
        raise HTTPException(404, str(exc)) from None
    return render(
        request,
        "gpu.html",
        active="gpus",
        title=f"GPU {page.label}",
        window=w,
        page=page,
        figures=charts.gpu_figures(page),
        refresh=_charts_url(request),
        notes=page.notes,
    )


@router.get("/workloads", response_class=HTMLResponse)
def workloads(request: Request, dash: Dash, q: Win) -> HTMLResponse:
    w = resolve_window(dash, q)
    page = dash.workloads(w)
    return render(
        request,
        "workloads.html",
        active="workloads",
        title="Workloads",
        window=w,
        page=page,
        figures=charts.workloads_figures(page),
        refresh=_charts_url(request),
        notes=page.notes,
    )


@router.get("/people", response_class=HTMLResponse)
def people(request: Request, dash: Dash, q: Win, by: FairnessBy | None = None) -> HTMLResponse:
    w = resolve_window(dash, q)
    page = dash.people(w, by)
    return render(
        request,
        "people.html",
        active="people",
        title="Jobs and users",
        window=w,
        page=page,
        currency=page.currency,
        figures=charts.people_figures(page),
        refresh=_charts_url(request),
        notes=page.notes,
    )


@router.get("/findings", response_class=HTMLResponse)
def findings(
    request: Request,
    dash: Dash,
    q: Win,
    severity: Severity | None = None,
    rule: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    w = resolve_window(dash, q)
    page = dash.findings(w, severity, rule)
    return render(
        request,
        "findings.html",
        active="findings",
        title="Findings",
        window=w,
        page=page,
        severity=severity,
        rule=rule,
        figures=charts.findings_figures(page),
        refresh=_charts_url(request),
        notes=page.notes,
    )


@router.get("/traces", response_class=HTMLResponse)
def traces(
    request: Request,
    dash: Dash,
    name: Annotated[str | None, Query(max_length=1024)] = None,
    dir_: Annotated[int, Query(alias="dir", ge=0, le=1000)] = 0,
    upload: Annotated[str | None, Query(pattern=r"^[0-9a-f]{32}$")] = None,
) -> HTMLResponse:
    trace, error, status = None, None, 200
    if upload is not None:
        trace = dash.uploaded(upload)
        if trace is None:
            error, status = "That upload is no longer kept: upload the trace again.", 404
    elif name:
        try:
            trace = dash.trace(dir_, name)
        except (TracePathError, TraceFormatError) as exc:
            http = trace_error(exc)
            error, status = str(http.detail), http.status_code
    return render(
        request,
        "traces.html",
        active="traces",
        title="Traces",
        trace=trace,
        error=error,
        entries=dash.trace_list(),
        max_upload=dash.ctx.max_upload_bytes,
        status=status,
        figures=charts.trace_figures(trace) if trace is not None else None,
    )


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


# -- figures for the periodic refresh ----------------------------------------------------------


@router.get("/charts/fleet")
def fleet_charts(dash: Dash, q: Win) -> JSONResponse:
    return JSONResponse({"figures": charts.fleet_figures(dash.fleet(resolve_window(dash, q)))})


@router.get("/charts/gpus/{gpu_uuid}")
def gpu_charts(dash: Dash, gpu_uuid: str, q: Win) -> JSONResponse:
    try:
        page = dash.gpu(gpu_uuid, resolve_window(dash, q))
    except UnknownGpu as exc:
        raise HTTPException(404, str(exc)) from None
    return JSONResponse({"figures": charts.gpu_figures(page)})


@router.get("/charts/workloads")
def workloads_charts(dash: Dash, q: Win) -> JSONResponse:
    page = dash.workloads(resolve_window(dash, q))
    return JSONResponse({"figures": charts.workloads_figures(page)})


@router.get("/charts/people")
def people_charts(dash: Dash, q: Win, by: FairnessBy | None = None) -> JSONResponse:
    page = dash.people(resolve_window(dash, q), by)
    return JSONResponse({"figures": charts.people_figures(page)})


@router.get("/charts/findings")
def findings_charts(dash: Dash, q: Win) -> JSONResponse:
    page = dash.findings(resolve_window(dash, q))
    return JSONResponse({"figures": charts.findings_figures(page)})


@router.get("/charts/cluster")
def cluster_charts(dash: Dash, q: Win, heat: HeatMetric | None = None) -> JSONResponse:
    w = None if dash.cluster_from_prometheus() else resolve_window(dash, q)
    page = dash.cluster(w)
    status = page.status
    return JSONResponse(
        {
            "figures": charts.cluster_figures(page, heat),
            "status": {"error": status.error, "refreshed_ns": status.refreshed_ns},
        }
    )
