"""The Grafana dashboard over the agent's metrics, as data (`dashboard`) and as JSON.

Rows: the fleet's useful work against its duty cycle (with SM and tensor activity, GPUs by
state); SM activity stacked by inference engine (native PyTorch against TensorRT and the rest);
waste by cause and its price; per-user and per-job tables; findings and the agents' health.
Template variables: the Prometheus data source, and `Hostname`, `user` and `job_id` (multi,
"All" = `.*`, which also matches GPUs nobody holds). Panels query the raw series, so the
dashboard works without the recording rules.

Waste is counted when a state window closes (60 s by default), so its rates are taken over
10 minutes. The waste counters carry the GPU's labels, not the job's: per-user and per-job
waste is attributed to the GPU's holder at query time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpulens.analyze.prices import DEFAULT_CURRENCY

UID = "gpulens-fleet"
TITLE = "gpulens: useful work, waste and its price"
DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
#: the selection every GPU series is filtered by
SEL = 'Hostname=~"$Hostname", user=~"$user", job_id=~"$job_id"'
WASTE = 'gpulens_wasted_gpu_seconds_total{Hostname=~"$Hostname"}'
#: the waste counters of the selected GPUs (they carry no user or job labels)
SELECTED_WASTE_RATE = f"rate({WASTE}[10m]) and on (Hostname, UUID) gpulens_gpu_util_ratio{{{SEL}}}"
PRICE = "on (Hostname, UUID) group_left gpulens_gpu_hour_price"
#: Grafana's currency units
_CURRENCY_UNITS = {"USD": "currencyUSD", "EUR": "currencyEUR", "GBP": "currencyGBP"}

Panel = dict[str, Any]


def _target(expr: str, legend: str = "", ref: str = "A", *, table: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {"datasource": DS, "refId": ref, "expr": expr, "range": not table}
    if table:
        target.update(instant=True, format="table")
    else:
        target["legendFormat"] = legend or "__auto"
    return target


def _panel(
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    grid: tuple[int, int, int, int],
    unit: str = "short",
    **extra: Any,
) -> Panel:
    x, y, w, h = grid
    defaults: dict[str, Any] = {"unit": unit}
    if unit == "percentunit":
        defaults.update(min=0, max=1)
    panel: Panel = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
    }
    for key, value in extra.items():
        if key == "custom":
            defaults["custom"] = value
        else:
            panel[key] = value
    return panel


def _stat(title: str, description: str, expr: str, x: int, unit: str) -> Panel:
    return _panel(
        "stat",
        title,
        description,
        [_target(expr, title)],
        (x, 1, 4, 4),
        unit,
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
    )


def _stacked(fill: int = 60) -> dict[str, Any]:
    return {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": fill, "lineWidth": 1}


def _row(title: str, y: int) -> Panel:
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def _table(
    title: str,
    description: str,
    key: str,
    columns: list[tuple[str, str, str]],
    grid: tuple[int, int, int, int],
) -> Panel:
    """A table of instant queries merged on their labels; columns are (name, unit, expr)."""
    refs = [chr(ord("A") + i) for i in range(len(columns))]
    targets = [
        _target(expr, ref=ref, table=True) for ref, (_, _, expr) in zip(refs, columns, strict=True)
    ]
    rename = {f"Value #{ref}": name for ref, (name, _, _) in zip(refs, columns, strict=True)}
    if len(columns) == 1:
        rename["Value"] = columns[0][0]  # Grafana numbers the value column only when there are more
    overrides = [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "unit", "value": unit}],
        }
        for name, unit, _ in columns
        if unit != "short"
    ]
    panel = _panel(
        "table",
        title,
        description,
        targets,
        grid,
        transformations=[
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True}, "renameByName": rename},
            },
        ],
        options={"showHeader": True, "sortBy": [{"displayName": columns[0][0], "desc": True}]},
    )
    panel["fieldConfig"]["overrides"] = overrides
    panel["description"] += f" One row per {key}."
    return panel


def _holder(by: str) -> str:
    """One series per GPU (value 1) carrying the labels `by` of its current holder."""
    labels = ", ".join(f'{k}!=""' for k in by.split(", "))
    return f"topk by (Hostname, UUID) (1, gpulens_gpu_util_ratio{{{SEL}, {labels}}} * 0 + 1)"


def _per(by: str, currency_unit: str) -> list[tuple[str, str, str]]:
    """The columns of the per-user and per-job tables, grouped `by`."""
    held = ", ".join(f'{k}!=""' for k in by.split(", "))
    sel = f"{{{SEL}, {held}}}"
    waste = f"increase({WASTE}[$__range]) * on (Hostname, UUID) group_left ({by}) {_holder(by)}"
    return [
        ("GPUs", "short", f"count by ({by}) (gpulens_gpu_util_ratio{sel})"),
        ("duty cycle", "percentunit", f"avg by ({by}) (gpulens_gpu_util_ratio{sel})"),
        ("SM active", "percentunit", f"avg by ({by}) (gpulens_sm_active_ratio{sel})"),
        ("tensor active", "percentunit", f"avg by ({by}) (gpulens_tensor_active_ratio{sel})"),
        ("useful work", "percentunit", f"avg by ({by}) (gpulens_useful_work_ratio{sel})"),
        ("memory held", "bytes", f"sum by ({by}) (gpulens_memory_used_bytes{sel})"),
        (
            "idle GPUs",
            "short",
            f'sum by ({by}) (gpulens_gpu_state{{{SEL}, {held}, state="idle_allocated"}})',
        ),
        (
            "spend per hour",
            currency_unit,
            f"sum by ({by}) ((gpulens_gpu_util_ratio{sel} * 0 + 1) * {PRICE})",
        ),
        ("wasted GPU-hours", "short", f"sum by ({by}) ({waste}) / 3600"),
        ("waste price", currency_unit, f"sum by ({by}) (({waste}) * {PRICE}) / 3600"),
    ]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def dashboard(currency: str = DEFAULT_CURRENCY) -> dict[str, Any]:
    """The dashboard model (Grafana 10+ JSON, schema 39)."""
    money = _CURRENCY_UNITS.get(currency, f"suffix: {currency}")
    per_hour = _CURRENCY_UNITS.get(currency, f"suffix: {currency}/h")
    panels: list[Panel] = [_row("Fleet: useful work versus duty cycle", 0)]
    panels += [
        _stat(
            "Duty cycle",
            "nvidia-smi's GPU-Util: the fraction of time any kernel ran. Not useful work.",
            f"avg(gpulens_gpu_util_ratio{{{SEL}}})",
            0,
            "percentunit",
        ),
        _stat(
            "SM active",
            "Fraction of cycles an SM had a warp, averaged over the SMs (DCGM: >= 0.8 needed).",
            f"avg(gpulens_sm_active_ratio{{{SEL}}})",
            4,
            "percentunit",
        ),
        _stat(
            "Tensor active",
            "Fraction of cycles the tensor pipes were active.",
            f"avg(gpulens_tensor_active_ratio{{{SEL}}})",
            8,
            "percentunit",
        ),
        _stat(
            "Useful work",
            "The busiest math pipe's activity at full clock: what the GPUs achieved of their peak.",
            f"avg(gpulens_useful_work_ratio{{{SEL}}})",
            12,
            "percentunit",
        ),
        _stat(
            "GPUs",
            "GPUs (and MIG instances) in the selection.",
            f"count(gpulens_gpu_util_ratio{{{SEL}}})",
            16,
            "short",
        ),
        _stat(
            "Waste per hour",
            "Price per hour of the allocated GPU time that did no useful work (last 10 min).",
            f"sum(({SELECTED_WASTE_RATE}) * {PRICE})",
            20,
            per_hour,
        ),
        _panel(
            "timeseries",
            "Useful work versus duty cycle",
            "The duty cycle says a kernel ran; SM and tensor activity and useful work say how "
            "much of the GPU it used. The gap between the top line and the bottom one is the "
            "work a busy-looking fleet does not do.",
            [
                _target(f"avg(gpulens_gpu_util_ratio{{{SEL}}})", "duty cycle", "A"),
                _target(f"avg(gpulens_sm_active_ratio{{{SEL}}})", "SM active", "B"),
                _target(f"avg(gpulens_tensor_active_ratio{{{SEL}}})", "tensor active", "C"),
                _target(f"avg(gpulens_useful_work_ratio{{{SEL}}})", "useful work", "D"),
            ],
            (0, 5, 16, 9),
            "percentunit",
            custom={"fillOpacity": 10, "lineWidth": 2},
        ),
        _panel(
            "timeseries",
            "GPUs by state",
            "Each GPU's state over the agent's state window (idle, hollow busy, memory bound, "
            "input bound, throttled, ...): see docs/analysis/states.md.",
            [_target(f"sum by (state) (gpulens_gpu_state{{{SEL}}})", "{{state}}")],
            (16, 5, 8, 9),
            "short",
            custom=_stacked(),
        ),
        _row("Engines: native PyTorch versus TensorRT and the rest", 14),
        _panel(
            "timeseries",
            "SM activity by engine",
            "SM activity summed per inference engine over the fleet's GPU count: the stack is "
            "the fleet's mean SM activity, split by who produced it (`none`: GPUs nobody "
            "holds).",
            [
                _target(
                    f'label_replace(sum by (engine) (gpulens_sm_active_ratio{{{SEL}}}), "engine", '
                    f'"none", "engine", "") / scalar(count(gpulens_sm_active_ratio{{{SEL}}}))',
                    "{{engine}}",
                )
            ],
            (0, 15, 12, 9),
            "percentunit",
            custom=_stacked(),
        ),
        _panel(
            "bargauge",
            "Useful work per GPU, by engine",
            "Mean useful work of the GPUs each engine runs on.",
            [
                _target(
                    f'avg by (engine) (gpulens_useful_work_ratio{{{SEL}, engine!=""}})',
                    "{{engine}}",
                )
            ],
            (12, 15, 6, 9),
            "percentunit",
            options={"orientation": "horizontal", "displayMode": "gradient"},
        ),
        _panel(
            "bargauge",
            "GPUs by engine",
            "GPUs each engine runs on.",
            [
                _target(
                    f'count by (engine) (gpulens_gpu_util_ratio{{{SEL}, engine!=""}})',
                    "{{engine}}",
                )
            ],
            (18, 15, 6, 9),
            "short",
            options={"orientation": "horizontal", "displayMode": "gradient"},
        ),
        _row("Waste by cause and its price", 24),
        _panel(
            "timeseries",
            "Wasted GPUs by cause",
            "Allocated GPU-seconds per second that did no useful work, by cause (idle "
            "allocated, hollow busy, input bound, ...), over 10 minutes.",
            [_target(f"sum by (cause) ({SELECTED_WASTE_RATE})", "{{cause}}")],
            (0, 25, 9, 9),
            "short",
            custom=_stacked(),
        ),
        _panel(
            "timeseries",
            "Price of the waste per hour, by cause",
            "The wasted GPU time priced at each GPU model's GPU-hour price "
            "(`gpulens_gpu_hour_price`, from the agent's `cost.gpu_hour_prices`).",
            [_target(f"sum by (cause) (({SELECTED_WASTE_RATE}) * {PRICE})", "{{cause}}")],
            (9, 25, 9, 9),
            per_hour,
            custom=_stacked(),
        ),
        _table(
            "Waste over the time range",
            "Wasted GPU-hours and their price over the dashboard's time range.",
            "cause",
            [
                (
                    "wasted GPU-hours",
                    "short",
                    f"sum by (cause) (increase({WASTE}[$__range]) and on (Hostname, UUID) "
                    f"gpulens_gpu_util_ratio{{{SEL}}}) / 3600",
                ),
                (
                    "price",
                    money,
                    f"sum by (cause) ((increase({WASTE}[$__range]) and on (Hostname, UUID) "
                    f"gpulens_gpu_util_ratio{{{SEL}}}) * {PRICE}) / 3600",
                ),
            ],
            (18, 25, 6, 9),
        ),
        _row("Users and jobs", 34),
        _table(
            "Per user",
            "What each user's GPUs do now, what they cost per hour, and the waste over the "
            "time range of the GPUs they hold now.",
            "user",
            _per("user", money),
            (0, 35, 24, 8),
        ),
        _table(
            "Per job",
            "What each job's GPUs do now, what they cost per hour, and the waste over the time "
            "range of the GPUs it holds now.",
            "job",
            _per("job_id, user", money),
            (0, 43, 24, 10),
        ),
        _row("Findings and agents", 53),
        _table(
            "Active findings",
            "Findings of each agent's last analysis pass (`gpulens report` explains them).",
            "rule and severity",
            [("findings", "short", "sum by (rule_id, severity) (gpulens_findings_active)")],
            (0, 54, 12, 8),
        ),
        _panel(
            "timeseries",
            "Seconds since each agent's last tick",
            "Age of each agent's newest collection tick; alerts fire past 60 s.",
            [_target("time() - gpulens_last_tick_timestamp_seconds", "{{instance}}")],
            (12, 54, 6, 8),
            "s",
        ),
        _panel(
            "timeseries",
            "Collectors up",
            "1 when a collector's last run succeeded.",
            [_target("gpulens_collector_up", "{{instance}} {{collector}}")],
            (18, 54, 6, 8),
            "short",
        ),
    ]
    for i, panel in enumerate(panels, start=1):
        panel["id"] = i
    return {
        "uid": UID,
        "title": TITLE,
        "description": "What the GPUs really do: useful work against duty cycle, waste by "
        "cause and its price, per user and per job (gpulens agent metrics).",
        "tags": ["gpulens", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "options": [],
                    "regex": "",
                    "refresh": 1,
                    "includeAll": False,
                    "multi": False,
                    "hide": 0,
                },
                _variable("Hostname", "Host", "label_values(gpulens_gpu_util_ratio, Hostname)"),
                _variable(
                    "user",
                    "User",
                    'label_values(gpulens_gpu_util_ratio{Hostname=~"$Hostname"}, user)',
                ),
                _variable(
                    "job_id",
                    "Job",
                    'label_values(gpulens_gpu_util_ratio{Hostname=~"$Hostname", user=~"$user"}, '
                    "job_id)",
                ),
            ]
        },
        "panels": panels,
    }


def dashboard_json(currency: str = DEFAULT_CURRENCY) -> str:
    """The dashboard as the JSON file Grafana imports or provisions."""
    return json.dumps(dashboard(currency), indent=2, ensure_ascii=False) + "\n"


def queries(model: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every panel target of a dashboard model."""
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
