"""The read-only JSON API: one endpoint per page's data, typed by the dashboard's view models
(which FastAPI turns into the OpenAPI schema). Uploading a trace analyses it and stores
nothing but the analysis, in memory, for the page to show."""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from gpulens.app.heap import release_memory
from gpulens.errors import GpulensError, InputTooLarge, TraceFormatError
from gpulens.findings.engine import RULES
from gpulens.present.dashboard import (
    ClusterPage,
    FindingsPage,
    FleetPage,
    GpuEntry,
    GpuPage,
    NowStrip,
    PeoplePage,
    TraceEntry,
    TracePage,
    TracePathError,
    UnknownGpu,
    WorkloadsPage,
)
from gpulens.present.dashboard.findings import DEFAULT_LIMIT, MAX_LIMIT
from gpulens.present.dashboard.service import Dashboard
from gpulens.present.dashboard.window import WindowInfo
from gpulens.present.web.cached import PageBodies
from gpulens.present.web.params import (
    RULE_PATTERN,
    FairnessBy,
    Severity,
    WindowQuery,
    dashboard,
    resolve_window,
    window_query,
)

router = APIRouter(prefix="/api", tags=["dashboard"])

Dash = Annotated[Dashboard, Depends(dashboard)]
Win = Annotated[WindowQuery, Depends(window_query)]
GpuId = Annotated[str, PathParam(min_length=1, max_length=128, description="The GPU's UUID.")]
UPLOAD_CHUNK = 1 << 20
MAX_UPLOADS = 2  # uploads received or analysed at once; more get 503 (each may take a core)
log = logging.getLogger(__name__)


class Problem(BaseModel):
    """Why a request failed."""

    detail: str


class UploadResult(BaseModel):
    """An analysed upload: `id` names it for `/api/traces/uploads/{id}` and `/traces?upload=`."""

    id: str
    size_bytes: int
    page: TracePage


Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"model": Problem, "description": "Nothing by that name."}}
TRACE_ERRORS: Responses = {
    403: {"model": Problem, "description": "The name leads outside the trace directories."},
    404: {"model": Problem, "description": "No such trace."},
    413: {
        "model": Problem,
        "description": "Larger than agent.max_upload_bytes, or past a limits.* setting once "
        "decompressed.",
    },
    422: {"model": Problem, "description": "Not a trace, or a malformed name."},
}
UPLOAD_ERRORS: Responses = {
    400: {"model": Problem, "description": "The client disconnected before the upload ended."},
    503: {"model": Problem, "description": "Too many uploads at once; retry later."},
}


def shared(request: Request, page: object) -> Response:
    """A page the dashboard keeps (with its analysed window; the live strip, until the live
    state changes) as the JSON all its viewers share (serialised and gzipped once:
    present/web/cached.py)."""
    bodies: PageBodies = request.app.state.bodies
    return bodies.response(request, page)


@router.get("/now", response_model=NowStrip, summary="The live state now")
def now(request: Request, dash: Dash) -> Response:
    """Fleet means, states and findings of the agent's last tick (`live` false without one)."""
    return shared(request, dash.now())


@router.get("/window", response_model=WindowInfo, summary="The window a range resolves to")
def window(dash: Dash, q: Win) -> WindowInfo:
    """Start, end and step of the window the other endpoints would use for these parameters."""
    return WindowInfo.of(resolve_window(dash, q))


@router.get("/fleet", response_model=FleetPage, summary="Fleet page data")
def fleet(request: Request, dash: Dash, q: Win) -> Response:
    """Allocated versus useful GPU-hours, waste by cause (GPU-hours, money, kWh, CO2e), the
    fleet over time and the GPU × time heatmap of useful work."""
    return shared(request, dash.fleet(resolve_window(dash, q)))


@router.get("/cluster", response_model=ClusterPage, summary="Cluster page data")
def cluster(request: Request, dash: Dash, q: Win) -> Response:
    """Nodes × time (useful work and duty cycle per node), allocation and pending-while-idle
    per queue, usage per team, the idle-allocated inventory, the fleet plans, and the state of
    the source (a site's Prometheus read every few minutes, or the agent's store over the
    window)."""
    w = None if dash.cluster_from_prometheus() else resolve_window(dash, q)
    return shared(request, dash.cluster(w))


@router.get("/gpus", response_model=list[GpuEntry], summary="The GPUs of the store")
def gpus(dash: Dash) -> list[GpuEntry]:
    """Every GPU with readings over the newest day."""
    return dash.gpus()


@router.get(
    "/gpus/{gpu_uuid}", response_model=GpuPage, responses=NOT_FOUND, summary="GPU page data"
)
def gpu(dash: Dash, gpu_uuid: GpuId, q: Win) -> GpuPage:
    """One GPU's duty cycle, SM, tensor and DRAM activity, memory, power and clock, with
    warm-ups and events."""
    try:
        return dash.gpu(gpu_uuid, resolve_window(dash, q))
    except UnknownGpu as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None


@router.get("/workloads", response_model=WorkloadsPage, summary="Workloads page data")
def workloads(request: Request, dash: Dash, q: Win) -> Response:
    """SM activity stacked by engine over time, efficiency per engine, engine migrations."""
    return shared(request, dash.workloads(resolve_window(dash, q)))


@router.get("/people", response_model=PeoplePage, summary="Jobs and users page data")
def people(
    request: Request,
    dash: Dash,
    q: Win,
    by: Annotated[
        FairnessBy | None,
        Query(description="Groups fairness is shown for (default: fairness.quota_by)."),
    ] = None,
) -> Response:
    """A report card per job and per user, and fairness against quota."""
    return shared(request, dash.people(resolve_window(dash, q), by))


@router.get("/findings", response_model=FindingsPage, summary="Findings page data")
def findings(
    request: Request,
    dash: Dash,
    q: Win,
    severity: Annotated[Severity | None, Query(description="Only this severity.")] = None,
    rule: Annotated[
        str | None,
        Query(pattern=RULE_PATTERN, description=f"Only this rule: one of {', '.join(RULES)}."),
    ] = None,
    limit: Annotated[int, Query(ge=0, le=MAX_LIMIT, description="Most findings listed.")] = (
        DEFAULT_LIMIT
    ),
) -> Response:
    """The window's findings, largest impact first, with evidence, impact, fix and the GPU
    chart window each comes from."""
    if rule is not None and rule not in RULES:
        raise HTTPException(
            status_code=422, detail=f"rule {rule!r} is not one of {', '.join(RULES)}"
        )
    return shared(request, dash.findings(resolve_window(dash, q), severity, rule, limit))


@router.get("/traces", response_model=list[TraceEntry], summary="Traces that can be opened")
def traces(dash: Dash) -> list[TraceEntry]:
    """Trace files and rank directories under the configured `agent.trace_dirs`."""
    return dash.trace_list()


def trace_error(
    exc: Exception, shown: str | None = None, hidden: Path | None = None
) -> HTTPException:
    """The HTTP error for a trace that cannot be opened or analysed; `hidden` (a server path)
    is replaced by `shown` in the message."""
    message = str(exc)
    if hidden is not None and shown is not None:
        message = message.replace(str(hidden), shown)
    if isinstance(exc, TracePathError):
        status = exc.status
    else:
        status = 413 if isinstance(exc, InputTooLarge) else 422
    return HTTPException(status_code=status, detail=message)


@router.get(
    "/traces/analysis",
    response_model=TracePage,
    responses=TRACE_ERRORS,
    summary="A trace's analysis",
)
def trace_analysis(
    dash: Dash,
    name: Annotated[
        str, Query(min_length=1, max_length=1024, description="As /api/traces lists it.")
    ],
    dir_: Annotated[
        int, Query(alias="dir", ge=0, le=1000, description="Trace directory index.")
    ] = 0,
) -> TracePage:
    """Analyse a listed trace (a file, or a directory of one job's ranks)."""
    try:
        return dash.trace(dir_, name)
    except (TracePathError, TraceFormatError, InputTooLarge) as exc:
        raise trace_error(exc) from None


def upload_file_name(name: str) -> str:
    """A safe local file name for an upload called `name` (what the analysis will show)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:200]
    return safe or "upload.json"


@router.post(
    "/traces/upload",
    response_model=UploadResult,
    responses={**TRACE_ERRORS, **UPLOAD_ERRORS},
    summary="Analyse an uploaded trace",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def upload(
    request: Request,
    dash: Dash,
    name: Annotated[
        str,
        Query(
            min_length=1, max_length=255, pattern=r"^[^/\\\x00]+$", description="File name shown."
        ),
    ] = "upload.json",
) -> UploadResult:
    """The raw trace file (JSON or gzip) as the body; at most `agent.max_upload_bytes`, and
    within the `limits.*` settings once decompressed. At most MAX_UPLOADS at a time."""
    limit = dash.ctx.max_upload_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"the upload is {int(declared):,} bytes; the limit is {limit:,}")
    state = request.app.state
    active = getattr(state, "uploads_active", 0)
    if active >= MAX_UPLOADS:
        raise HTTPException(
            503,
            f"{MAX_UPLOADS} uploads are being analysed already: try again in a few seconds",
            headers={"Retry-After": "5"},
        )
    state.uploads_active = active + 1  # no await since the check: no other upload came between
    try:
        return await _receive_and_analyse(request, dash, name, limit)
    finally:
        state.uploads_active -= 1


async def _receive_and_analyse(
    request: Request, dash: Dashboard, name: str, limit: int
) -> UploadResult:
    """Write the body to a temporary file (off the event loop), then analyse it in a thread."""
    digest = hashlib.sha256()
    size = 0
    with tempfile.TemporaryDirectory(prefix="gpulens-upload-") as tmp:
        path = Path(tmp) / upload_file_name(name)
        out = await run_in_threadpool(path.open, "wb")
        pending = bytearray()  # written a UPLOAD_CHUNK at a time, in a thread
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HTTPException(413, f"the upload exceeds the limit of {limit:,} bytes")
                digest.update(chunk)
                pending += chunk
                if len(pending) >= UPLOAD_CHUNK:
                    await run_in_threadpool(out.write, bytes(pending))
                    pending.clear()
            if pending:
                await run_in_threadpool(out.write, bytes(pending))
        except ClientDisconnect:
            log.warning("upload %r: the client disconnected after %s bytes", name, f"{size:,}")
            raise HTTPException(400, "the client disconnected before the upload ended") from None
        finally:
            await run_in_threadpool(out.close)
        if size == 0:
            raise HTTPException(422, "the upload is empty: send the trace file as the body")
        upload_id = digest.hexdigest()[:32]
        page = await run_in_threadpool(_analyse, dash, path, name, upload_id)
        if isinstance(page, GpulensError):
            log.info("upload %r refused: %s", name, page)
            raise trace_error(page, name, path)
    return UploadResult(id=upload_id, size_bytes=size, page=page)


def _analyse(dash: Dashboard, path: Path, name: str, upload_id: str) -> TracePage | GpulensError:
    """The upload's page, or the error that refused it, without its traceback: the frames it
    holds (a half-loaded trace's columns) are freed here, and the heap handed back."""
    try:
        return dash.analyse_upload(path, name, upload_id)
    except GpulensError as exc:
        exc.__traceback__ = exc.__context__ = exc.__cause__ = None
        return exc
    finally:
        release_memory()


@router.get(
    "/traces/uploads/{upload_id}",
    response_model=TracePage,
    responses=NOT_FOUND,
    summary="An uploaded trace's analysis",
)
def uploaded(
    dash: Dash,
    upload_id: Annotated[str, PathParam(pattern=r"^[0-9a-f]{32}$")],
) -> TracePage:
    """The analysis of a recent upload (kept in memory; gone after a restart)."""
    page = dash.uploaded(upload_id)
    if page is None:
        raise HTTPException(404, f"no recent upload {upload_id!r}: upload the trace again")
    return page
