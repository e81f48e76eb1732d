"""View models of the web dashboard: store and live state in, plain dataclasses out.

One module per page (fleet, cluster, gpu, workloads, people, findings, traces) plus the live "now"
strip; `window` chooses the time window and its step, `common` runs the report pipeline once
per window (`analyse_window`) for the pages to share, `service` ties them to an agent's
context with a small cache. Front ends (the FastAPI routes and templates in `present.web`)
render these and compute nothing.
"""

from __future__ import annotations

from gpulens.app.trace_dirs import TraceEntry, TracePathError
from gpulens.present.dashboard.cluster import ClusterPage, cluster_page
from gpulens.present.dashboard.common import Analysed, Settings, analyse_window
from gpulens.present.dashboard.findings import FindingsPage, findings_page
from gpulens.present.dashboard.fleet import FleetPage, fleet_page
from gpulens.present.dashboard.gpu import GpuEntry, GpuPage, UnknownGpu, gpu_list, gpu_page
from gpulens.present.dashboard.now import NowStrip, now_strip
from gpulens.present.dashboard.people import PeoplePage, people_page
from gpulens.present.dashboard.traces import TracePage, trace_page
from gpulens.present.dashboard.window import RANGES, Window, choose_step, resolve
from gpulens.present.dashboard.workloads import WorkloadsPage, workloads_page

__all__ = [
    "RANGES",
    "Analysed",
    "ClusterPage",
    "FindingsPage",
    "FleetPage",
    "GpuEntry",
    "GpuPage",
    "NowStrip",
    "PeoplePage",
    "Settings",
    "TraceEntry",
    "TracePage",
    "TracePathError",
    "UnknownGpu",
    "Window",
    "WorkloadsPage",
    "analyse_window",
    "choose_step",
    "cluster_page",
    "findings_page",
    "fleet_page",
    "gpu_list",
    "gpu_page",
    "now_strip",
    "people_page",
    "resolve",
    "trace_page",
    "workloads_page",
]
