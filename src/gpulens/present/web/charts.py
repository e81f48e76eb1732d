"""Plotly figures (plain dicts: `data`, `layout`) from the dashboard's view models.

Only layout and mapping happen here: every number comes from `present.dashboard`. Times go to
plotly as epoch milliseconds on date axes (shown in UTC).
"""

from __future__ import annotations

from typing import Any

from gpulens.present.dashboard import (
    ClusterPage,
    FindingsPage,
    FleetPage,
    GpuPage,
    PeoplePage,
    TracePage,
    WorkloadsPage,
)
from gpulens.present.reports.markup import CAUSE_COLORS

Figure = dict[str, Any]
EVENT_COLORS: dict[str, str] = {
    "deploy": "#1f77b4",
    "version": "#7f7f7f",
    "version_change": "#9467bd",
    "engine_build": "#2ca02c",
    "engine_build_failed": "#d62728",
    "engine_fallback": "#ff7f0e",
    "job_start": "#17becf",
    "oom": "#d62728",
    "xid": "#d62728",
}
MAX_EVENT_LINES = 200
#: bar colours of the waste-by-cause chart per kind (anything else: grey)
_KIND_COLOURS = {"wasted": "#d62728", "headroom": "#1f77b4"}


def _ms(times_ns: list[int]) -> list[int]:
    return [t // 1_000_000 for t in times_ns]


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 14}, "x": 0.01},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "height": 300,
        "legend": {"orientation": "h", "y": -0.18},
        "hovermode": "x unified",
    }
    layout.update(extra)
    return layout


def _date_axis() -> dict[str, Any]:
    return {"type": "date", "hoverformat": "%Y-%m-%d %H:%M UTC"}


def _line(name: str, x: list[int], y: list[float | None], **extra: Any) -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": y, **extra}


# -- fleet -------------------------------------------------------------------------------------


def fleet_figures(page: FleetPage) -> dict[str, Figure]:
    x = _ms(page.timeline.times_ns)
    tl = page.timeline
    usage = {
        "data": [
            _line("GPUs", x, tl.gpus, line={"color": "#bbbbbb", "dash": "dot"}),
            _line("allocated", x, tl.allocated, line={"color": "#1f77b4"}),
            _line("useful", x, tl.useful, line={"color": "#2ca02c"}, fill="tozeroy"),
            _line("wasted", x, tl.wasted, line={"color": "#d62728"}),
        ],
        "layout": _layout(
            "Allocated versus useful (GPU equivalents)",
            xaxis=_date_axis(),
            yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"},
        ),
    }
    causes = [c for c in page.waste_by_cause if c["kind"] != "useful" and c.get("gpu_hours")]
    # plotly draws the first bar at the bottom: waste causes on top, largest first; headroom,
    # warm-up, unallocated and unmeasured below them, never ranked among the waste causes
    causes.sort(key=lambda c: (c["kind"] == "wasted", c["gpu_hours"]))
    waste = {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "name": "GPU-hours",
                "y": [c["cause"] for c in causes],
                "x": [c["gpu_hours"] for c in causes],
                "customdata": [
                    [c.get("total_cost"), c.get("energy_kwh"), c.get("co2e_kg"), c["kind"]]
                    for c in causes
                ],
                "hovertemplate": "%{y} (%{customdata[3]})<br>%{x:.2f} GPU-h<br>"
                f"%{{customdata[0]:,.2f}} {page.currency}<br>%{{customdata[1]:.2f}} kWh<br>"
                "%{customdata[2]:.2f} kg CO2e<extra></extra>",
                "marker": {"color": [_KIND_COLOURS.get(c["kind"], "#999999") for c in causes]},
            }
        ],
        "layout": _layout(
            "Waste by cause (GPU-hours; blue: headroom, not waste; grey: warm-up, "
            "unallocated, unmeasured)",
            hovermode="closest",
            xaxis={"title": {"text": "GPU-h"}},
            yaxis={"automargin": True},
            height=max(300, 80 + 22 * len(causes)),
        ),
    }
    hm = page.heatmap
    names = hm.states
    heat = {
        "data": [
            {
                "type": "heatmap",
                "x": _ms(hm.times_ns),
                "y": hm.gpus,
                "z": hm.useful,
                "customdata": [
                    [names[s] if s >= 0 else "no data" for s in row] for row in hm.state
                ],
                "zmin": 0,
                "zmax": 1,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "useful"}, "tickformat": ".0%"},
                "hovertemplate": "%{y} at %{x}<br>useful work %{z:.0%}<br>%{customdata}"
                "<extra></extra>",
                "xgap": 0,
                "ygap": 1,
            }
        ],
        "layout": _layout(
            "Useful work per GPU over time (click a GPU for its timeline)",
            xaxis=_date_axis(),
            yaxis={"autorange": "reversed", "type": "category", "automargin": True},
            hovermode="closest",
            height=max(260, 60 + 16 * len(hm.gpus)),
        ),
        "links": {
            label: f"/gpus/{uuid}" for label, uuid in zip(hm.gpus, hm.gpu_uuids, strict=True)
        },
    }
    return {"usage": usage, "waste": waste, "heatmap": heat}


# -- cluster ---------------------------------------------------------------------------------

HEAT_METRICS = {"useful": "useful work", "duty": "duty cycle"}


def cluster_figures(page: ClusterPage, metric: str | None = None) -> dict[str, Figure]:
    """The node × time heat map (useful work, or duty cycle), the cluster's GPUs over time
    with pending-while-idle, the off-peak heat map and the capacity forecast."""
    hm = page.heat
    shown = metric if metric in HEAT_METRICS else hm.metric
    label = HEAT_METRICS[shown]
    rows = [
        f"{n} ({q}, {g} GPU{'s' if g != 1 else ''})"
        for n, q, g in zip(hm.nodes, hm.queues, hm.gpus, strict=True)
    ]
    figures: dict[str, Figure] = {
        "heatmap": {
            "data": [
                {
                    "type": "heatmap",
                    "x": _ms(hm.times_ns),
                    "y": rows,
                    "z": hm.useful if shown == "useful" else hm.duty,
                    "zmin": 0,
                    "zmax": 1,
                    "colorscale": "Viridis",
                    "colorbar": {"title": {"text": label}, "tickformat": ".0%"},
                    "hovertemplate": f"%{{y}} at %{{x}}<br>{label} %{{z:.0%}}<extra></extra>",
                    "ygap": 1,
                }
            ],
            "layout": _layout(
                f"{label.capitalize()} per node over time (%, GPU-time-weighted mean of its "
                "GPUs; blank: no data)",
                xaxis=_date_axis(),
                yaxis={"autorange": "reversed", "type": "category", "automargin": True},
                hovermode="closest",
                height=max(260, 80 + 18 * len(rows)),
            ),
        }
    }
    sr = page.series
    x = _ms(sr.times_ns)
    figures["queues"] = {
        "data": [
            _line("GPUs reporting", x, sr.total, line={"color": "#bbbbbb", "dash": "dot"}),
            _line("in use (held)", x, sr.in_use, line={"color": "#1f77b4"}),
            _line("pending", x, sr.pending, line={"color": "#ff7f0e"}),
            _line(
                "pending while idle",
                x,
                sr.pending_while_idle,
                line={"color": "#d62728"},
                fill="tozeroy",
            ),
        ],
        "layout": _layout(
            "Cluster GPUs over time: held, pending, and pending while idle elsewhere (GPUs)",
            xaxis=_date_axis(),
            yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"},
        ),
    }
    if page.offpeak is not None:
        o = page.offpeak
        figures["offpeak"] = {
            "data": [
                {
                    "type": "heatmap",
                    "x": [f"{h:02d}:00" for h in range(24)],
                    "y": o.weekdays,
                    "z": o.demand_gpus,
                    "colorscale": "YlOrRd",
                    "colorbar": {"title": {"text": "GPUs"}},
                    "hovertemplate": "%{y} %{x} UTC<br>demand %{z:.1f} GPUs<extra></extra>",
                    "xgap": 1,
                    "ygap": 1,
                }
            ],
            "layout": _layout(
                "Off-peak plan: mean demand by weekday and hour (GPUs, UTC)",
                yaxis={"autorange": "reversed", "type": "category"},
                hovermode="closest",
            ),
        }
    if page.forecast is not None:
        f = page.forecast
        fx = _ms(f.times_ns)
        band = f"{100 * f.level:.0f}% interval"
        figures["forecast"] = {
            "data": [
                _line(f"{band} (high)", fx, f.hi, line={"width": 0}, showlegend=False),
                _line(
                    band,
                    fx,
                    f.lo,
                    line={"width": 0},
                    fill="tonexty",
                    fillcolor="rgba(31, 119, 180, 0.2)",
                ),
                _line(f"forecast ({f.model})", fx, f.mean, line={"color": "#1f77b4"}),
            ],
            "layout": _layout(
                "Capacity forecast: pooled demand, in use + pending (GPUs, hourly)",
                xaxis=_date_axis(),
                yaxis={"title": {"text": "GPUs"}, "rangemode": "tozero"},
            ),
        }
    return figures


# -- one GPU -----------------------------------------------------------------------------------


def _marks(page: GpuPage) -> list[dict[str, Any]]:
    shapes: list[dict[str, Any]] = [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": s.start_ns // 1_000_000,
            "x1": s.end_ns // 1_000_000,
            "y0": 0,
            "y1": 1,
            "fillcolor": "rgba(255, 160, 0, 0.18)",
            "line": {"width": 0},
            "layer": "below",
        }
        for s in page.warmups
    ]
    for e in page.events[:MAX_EVENT_LINES]:
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": e.ts_ns // 1_000_000,
                "x1": e.ts_ns // 1_000_000,
                "y0": 0,
                "y1": 1,
                "line": {
                    "color": EVENT_COLORS.get(e.category, "#555555"),
                    "dash": "dot",
                    "width": 1,
                },
            }
        )
    return shapes


def _event_trace(page: GpuPage, y: float) -> dict[str, Any]:
    events = page.events[:MAX_EVENT_LINES]
    return {
        "type": "scatter",
        "mode": "markers+text",
        "name": "events",
        "x": [e.ts_ns // 1_000_000 for e in events],
        "y": [y] * len(events),
        "hovertext": [f"{e.category}: {e.message or e.event or ''}" for e in events],
        # an engine fallback is labelled on the chart itself: "TensorRT unavailable"
        "text": [e.label if e.category == "engine_fallback" else "" for e in events],
        "textposition": "top center",
        "marker": {
            "symbol": "triangle-down",
            "size": 10,
            "color": [EVENT_COLORS.get(e.category, "#555555") for e in events],
        },
        "hovertemplate": "%{hovertext}<extra></extra>",
    }


def _scaled(values: list[float | None], factor: float) -> list[float | None]:
    return [None if v is None else v * factor for v in values]


def gpu_figures(page: GpuPage) -> dict[str, Figure]:
    x = _ms(page.times_ns)
    s = page.series
    shapes = _marks(page)
    layout = {"xaxis": _date_axis(), "shapes": shapes}
    activity = [
        _line(label, x, s[key])
        for label, key in (
            ("duty cycle", "duty"),
            ("SM active", "sm_active"),
            ("tensor active", "tensor_active"),
            ("DRAM active", "dram_active"),
        )
    ]
    if page.events:
        activity.append(_event_trace(page, 1.05))
    return {
        "activity": {
            "data": activity,
            "layout": _layout(
                "Duty cycle versus useful work (warm-up shaded, events marked)",
                yaxis={"tickformat": ".0%", "range": [0, 1.1]},
                **layout,
            ),
        },
        "memory": {
            "data": [
                _line("used", x, _scaled(s["memory_used_bytes"], 1e-9), fill="tozeroy"),
                _line("total", x, _scaled(s["memory_total_bytes"], 1e-9), line={"dash": "dot"}),
            ],
            "layout": _layout("Memory (GB)", yaxis={"rangemode": "tozero"}, **layout),
        },
        "power": {
            "data": [
                _line("power", x, s["power_watts"]),
                _line("limit", x, s["power_limit_watts"], line={"dash": "dot"}),
            ],
            "layout": _layout("Power (W)", yaxis={"rangemode": "tozero"}, **layout),
        },
        "clock": {
            "data": [
                _line("SM clock", x, _scaled(s["sm_clock_hertz"], 1e-6)),
                _line("max", x, _scaled(s["sm_clock_max_hertz"], 1e-6), line={"dash": "dot"}),
            ],
            "layout": _layout("SM clock (MHz)", yaxis={"rangemode": "tozero"}, **layout),
        },
    }


# -- workloads ---------------------------------------------------------------------------------


def workloads_figures(page: WorkloadsPage) -> dict[str, Figure]:
    x = _ms(page.times_ns)
    marks = page.fallbacks[:MAX_EVENT_LINES]
    heights = zip(*(e.sm_busy_gpus for e in page.stack), strict=True)  # one value per time
    top = max((sum(v or 0 for v in at) for at in heights), default=0)
    fallback_trace = {
        "type": "scatter",
        "mode": "markers+text",
        "name": "engine fallbacks",
        "x": [m.ts_ns // 1_000_000 for m in marks],
        "y": [top * 1.05 or 1] * len(marks),
        # labelled on the chart as on the GPU timeline: "TensorRT unavailable"
        "text": [m.label for m in marks],
        "hovertext": [
            f"job {m.job_id or '?'} on {m.host or '?'}: {m.message or ''}" for m in marks
        ],
        "textposition": "top center",
        "marker": {"symbol": "triangle-down", "size": 10, "color": EVENT_COLORS["engine_fallback"]},
        "hovertemplate": "%{hovertext}<extra></extra>",
    }
    stack = {
        "data": [
            *(
                _line(f"{e.engine} ({e.kind})", x, e.sm_busy_gpus, stackgroup="sm")
                for e in page.stack
            ),
            *([fallback_trace] if marks else []),
        ],
        "layout": _layout(
            "SM activity by engine (SM-busy GPU equivalents, stacked)",
            xaxis=_date_axis(),
            yaxis={"title": {"text": "GPUs × SM active"}, "rangemode": "tozero"},
        ),
    }
    engines = [e["engine"] for e in page.engines]
    efficiency = {
        "data": [
            {"type": "bar", "name": label, "x": engines, "y": [e.get(key) for e in page.engines]}
            for label, key in (
                ("duty cycle", "mean_duty"),
                ("SM active", "mean_sm_active"),
                ("tensor active", "mean_tensor_active"),
                ("useful per GPU-hour", "useful_per_gpu_hour"),
            )
        ],
        "layout": _layout(
            "Efficiency per engine",
            barmode="group",
            hovermode="closest",
            yaxis={"tickformat": ".0%", "rangemode": "tozero"},
        ),
    }
    return {"stack": stack, "efficiency": efficiency}


# -- jobs and users ----------------------------------------------------------------------------


def people_figures(page: PeoplePage, top: int = 20) -> dict[str, Figure]:
    f = page.fairness
    groups = [str(r.get(f.by)) for r in f.rows]
    fairness = {
        "data": [
            {"type": "bar", "name": label, "x": groups, "y": [r.get(key) for r in f.rows]}
            for label, key in (
                ("allocation share", "allocation_share"),
                ("useful-work share", "useful_share"),
                ("quota share", "quota_share"),
            )
        ],
        "layout": _layout(
            f"Fairness by {f.by}: allocation and useful work against quota",
            barmode="group",
            hovermode="closest",
            yaxis={"tickformat": ".0%", "rangemode": "tozero"},
        ),
    }
    jobs = sorted(page.jobs, key=lambda c: -(c.figures.get("allocated_gpu_hours") or 0.0))[:top]
    names = [c.name for c in jobs]
    cards = {
        "data": [
            {
                "type": "bar",
                "name": label,
                "x": names,
                "y": [c.figures.get(key) for c in jobs],
                "marker": {"color": color},
            }
            for label, key, color in (
                ("useful", "useful_gpu_hours", "#2ca02c"),
                ("wasted", "wasted_gpu_hours", "#d62728"),
                ("warm-up", "warmup_gpu_hours", "#ffa000"),
            )
        ],
        "layout": _layout(
            "GPU-hours per job: useful, wasted, warm-up",
            barmode="stack",
            hovermode="closest",
            yaxis={"title": {"text": "GPU-h"}},
        ),
    }
    return {"fairness": fairness, "jobs": cards}


# -- findings ----------------------------------------------------------------------------------


def findings_figures(page: FindingsPage) -> dict[str, Figure]:
    rules = list(page.waste_by_rule)
    return {
        "rules": {
            "data": [
                {
                    "type": "bar",
                    "name": "wasted GPU-hours",
                    "x": rules,
                    "y": [page.waste_by_rule[r] for r in rules],
                    "text": [f"{page.by_rule.get(r, 0)} finding(s)" for r in rules],
                    "marker": {"color": "#d62728"},
                }
            ],
            "layout": _layout(
                "Wasted GPU-hours by rule", hovermode="closest", yaxis={"title": {"text": "GPU-h"}}
            ),
        }
    }


# -- traces ------------------------------------------------------------------------------------


def _rank_label(rank: int | None, file: str) -> str:
    return f"rank {rank}" if rank is not None else file


def trace_figures(page: TracePage) -> dict[str, Figure]:
    labels = [_rank_label(r.rank, r.file) for r in page.ranks]
    causes = [
        c
        for c in CAUSE_COLORS
        if any(x["cause"] == c and x.get("idle_us") for r in page.ranks for x in r.idle_causes)
    ] or ["unknown"]
    idle = {
        "data": [
            {
                "type": "bar",
                "name": cause,
                "x": labels,
                "y": [
                    next((c["idle_us"] for c in r.idle_causes if c["cause"] == cause), 0.0)
                    for r in page.ranks
                ],
                "marker": {"color": CAUSE_COLORS[cause]},
            }
            for cause in causes
        ],
        "layout": _layout(
            "Device idle time by cause (µs)",
            barmode="stack",
            hovermode="closest",
            yaxis={"title": {"text": "µs"}},
        ),
    }
    timeline: list[dict[str, Any]] = []
    for r, label in zip(page.ranks, labels, strict=True):
        for g in r.gaps:
            timeline.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "name": g.cause,
                    "legendgroup": g.cause,
                    "showlegend": not any(t["name"] == g.cause for t in timeline),
                    "base": g.offsets_us,
                    "x": g.durations_us,
                    "y": [label] * len(g.offsets_us),
                    "marker": {"color": CAUSE_COLORS.get(g.cause, "#999999")},
                    "hovertemplate": "%{x:,.1f} µs at +%{base:,.1f} µs<extra>"
                    + g.cause
                    + "</extra>",
                }
            )
    if not timeline:
        timeline.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": "no idle gaps",
                "x": [0.0],
                "y": labels[:1] or ["-"],
            }
        )
    gaps = {
        "data": timeline,
        "layout": _layout(
            "Timeline: the longest device idle gaps, coloured by cause (µs from start)",
            barmode="overlay",
            hovermode="closest",
            height=max(220, 90 + 40 * len(labels)),
            xaxis={"title": {"text": "µs"}},
            yaxis={"type": "category"},
        ),
    }
    kernels = {
        "data": [
            {
                "type": "bar",
                "name": label,
                "x": [k["class"] for k in r.kernel_classes],
                "y": [k.get("time_us") for k in r.kernel_classes],
            }
            for r, label in zip(page.ranks, labels, strict=True)
        ],
        "layout": _layout(
            "Kernel time by class (µs)",
            barmode="group",
            hovermode="closest",
            yaxis={"title": {"text": "µs"}},
        ),
    }
    return {"idle": idle, "timeline": gaps, "kernels": kernels}
