"""Prometheus recording and alerting rules over the agent's metrics, or over dcgm-exporter's.

The rules are data (`rule_groups`), rendered to YAML by a small emitter (`to_yaml`: block
style, PromQL as literal blocks, no YAML library needed). The alerts follow the findings rules
of the same name (`rule_id` label): a GPU idle but allocated longer than `idle_for` (by
default the idle finding's warning level, `findings.idle_allocated.warn_minutes`: 60 min), hollow
busy (duty cycle high, SMs mostly empty), throttled, leaking memory, and jobs with little
useful work; plus the agent's own health.

With `dcgm=True` the rules read only what NVIDIA's dcgm-exporter writes (`DCGM_FI_*`, in its
units: GPU_UTIL in %, FB_* in MiB, violation counters in ns), so a site without the agent gets
the core alerts. States are approximated there: idle-allocated is FB_USED > 1 GiB with
GPU_UTIL == 0; hollow busy is GPU_UTIL > 80 with SM (or graphics-engine) activity < 0.5;
useful work is the busiest math pipe's activity. Every field is matched under its pre-4.6 and
its DCGM 4.6 name (`collect.dcgm.fields.FIELD_IDS`).

`write_rules` writes the rule file and, for the agent's metrics, the Grafana dashboard
(`grafana.py` beside this module). `python -m gpulens.present.prometheus.rules [docs_dir]`
regenerates the examples committed under docs/prometheus/ and docs/grafana/; a test fails
when they are stale.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from textwrap import dedent
from typing import Any

from gpulens import catalog
from gpulens.analyze.efficiency import Thresholds
from gpulens.collect.dcgm.fields import FIELD_IDS
from gpulens.config import BY_KEY
from gpulens.errors import ConfigError
from gpulens.present.prometheus import grafana

RULES_FILE = "gpulens.rules.yml"
DCGM_RULES_FILE = "gpulens-dcgm.rules.yml"
DASHBOARD_FILE = "gpulens.json"


def promql_duration(seconds: float) -> str:
    """Whole seconds as a Prometheus duration ("1h", "1h30m", "45s"); ConfigError under 1 s."""
    rest = round(seconds)
    if rest < 1:
        raise ConfigError(f"an alert duration of {seconds:g} s is under one second")
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


#: the idle finding's warning level, as `gpulens rules` writes it without --idle-for
DEFAULT_IDLE_FOR = promql_duration(BY_KEY["findings.idle_allocated.warn_minutes"].default * 60)
#: one GPU entity in dcgm-exporter's labels: a whole GPU, or a MIG instance of it
DCGM_GPU_KEY = "UUID, GPU_I_ID"
#: jobstats: GPU utilisation below 15 % is red
LOW_USEFUL_WORK = Thresholds().jobstats_red
#: a memory leak: +512 MiB in 30 min on a line that fills the GPU within two days
LEAK_GROWTH_MIB = 512
LEAK_HORIZON_S = 48 * 3600
IDLE_FB_USED_MIB = 1024

#: Prometheus' duration syntax (units largest first, each at most once)
_DURATION = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")
_NOT_PLAIN = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n"})

Rule = dict[str, Any]
Group = dict[str, Any]


def check_duration(text: str) -> str:
    """`text` if it is a PromQL duration ("30m", "1h30m"), else ConfigError."""
    if not text or not _DURATION.fullmatch(text) or not any(c in "123456789" for c in text):
        raise ConfigError(
            f"--idle-for {text!r} is not a Prometheus duration: use e.g. 30m, 2h or 1h30m "
            "(units ms, s, m, h, d, w, y; greater than zero)"
        )
    return text


def _expr(text: str) -> str:
    return "\n".join(line.rstrip() for line in dedent(text).strip().splitlines())


def _alert(
    name: str,
    rule_id: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
) -> Rule:
    return {
        "alert": name,
        "expr": _expr(expr),
        "for": for_,
        "labels": {"severity": severity, "rule_id": rule_id},
        "annotations": {"summary": summary, "description": description},
    }


def _record(name: str, expr: str) -> Rule:
    return {"record": name, "expr": _expr(expr)}


# -- the agent's metrics -----------------------------------------------------------------------
_WHO = "job {{ $labels.job_id }} of {{ $labels.user }}"
_WHERE = "GPU {{ $labels.gpu }} on {{ $labels.Hostname }}"


def agent_groups(idle_for: str = DEFAULT_IDLE_FOR) -> list[Group]:
    """Recording and alerting rules over the agent's `gpulens_*` series."""
    th = Thresholds()
    recording = [
        _record("fleet:gpulens_gpu_util_ratio:avg", "avg(gpulens_gpu_util_ratio)"),
        _record("fleet:gpulens_sm_active_ratio:avg", "avg(gpulens_sm_active_ratio)"),
        _record("fleet:gpulens_tensor_active_ratio:avg", "avg(gpulens_tensor_active_ratio)"),
        _record("fleet:gpulens_useful_work_ratio:avg", "avg(gpulens_useful_work_ratio)"),
        _record("state:gpulens_gpu_state:sum", "sum by (state) (gpulens_gpu_state)"),
        _record(
            "engine:gpulens_sm_active_ratio:fleet_share",
            """
            label_replace(sum by (engine) (gpulens_sm_active_ratio), "engine", "none", "engine", "")
              / scalar(count(gpulens_sm_active_ratio))
            """,
        ),
        _record(
            "job_id:gpulens_useful_work_ratio:avg",
            'avg by (job_id, user, project, team) (gpulens_useful_work_ratio{job_id!=""})',
        ),
        _record(
            "job_id:gpulens_gpu_util_ratio:avg",
            'avg by (job_id, user, project, team) (gpulens_gpu_util_ratio{job_id!=""})',
        ),
        _record(
            "user:gpulens_useful_work_ratio:avg",
            'avg by (user) (gpulens_useful_work_ratio{user!=""})',
        ),
        _record(
            "cause:gpulens_wasted_gpus:rate10m",
            "sum by (cause) (rate(gpulens_wasted_gpu_seconds_total[10m]))",
        ),
        _record(
            "cause:gpulens_wasted_price_per_hour:rate10m",
            """
            sum by (cause) (
              rate(gpulens_wasted_gpu_seconds_total[10m])
                * on (Hostname, UUID) group_left gpulens_gpu_hour_price
            )
            """,
        ),
        # headroom (healthy compute_tensor time that was not useful) is a series of its own,
        # never summed into the waste
        _record(
            "cause:gpulens_headroom_gpus:rate10m",
            "sum by (cause) (rate(gpulens_headroom_gpu_seconds_total[10m]))",
        ),
    ]
    alerts = [
        _alert(
            "GpulensGpuIdleAllocated",
            "idle_allocated",
            'gpulens_gpu_state{state="idle_allocated"} == 1',
            idle_for,
            "warning",
            f"{_WHERE} held idle by {_WHO} for more than {idle_for}",
            "The GPU holds memory or a process but does no work (activity <= "
            f"{th.idle_activity:g}). Release it: end the idle session or job, or turn on the "
            "notebook idle culler. See docs/findings/idle_allocated.md.",
        ),
        _alert(
            "GpulensGpuHollowBusy",
            "hollow_busy",
            'gpulens_gpu_state{state="hollow_busy"} == 1',
            "15m",
            "info",
            f"{_WHERE} ({_WHO}) looks busy but its SMs are mostly empty",
            f"Duty cycle >= {th.duty_busy:g} while SM activity < {th.sm_low:g}: kernels too small "
            "or launches too sparse. Batch more work per launch, capture CUDA graphs, or serve "
            "with an optimised engine. See docs/findings/hollow_busy.md.",
        ),
        _alert(
            "GpulensGpuThrottled",
            "throttled",
            'gpulens_gpu_state{state="throttled"} == 1',
            "10m",
            "warning",
            f"{_WHERE} ({_WHO}) is held below its clock by power or heat",
            f"Busy with the SM clock below {th.clock_throttled:g} of its maximum and power or "
            "thermal clock-event reasons set. Check cooling, power limits and the node's "
            "placement. See docs/findings/throttled.md.",
        ),
        _alert(
            "GpulensGpuMemoryLeak",
            "memory_leak",
            f"""
            delta(gpulens_memory_used_bytes[30m]) > {LEAK_GROWTH_MIB} * 2^20
            and
            predict_linear(gpulens_memory_used_bytes[30m], {LEAK_HORIZON_S})
              > gpulens_memory_total_bytes
            """,
            "1h",
            "warning",
            f"GPU memory of {_WHO} on {_WHERE} keeps growing",
            "Memory in use grew by {{ $value | humanize1024 }}B in 30 minutes, for an hour, on "
            f"a line that fills the GPU within {LEAK_HORIZON_S // 3600} hours. Look for "
            "tensors kept across steps (losses kept with their graph, growing caches). See "
            "docs/findings/memory_leak.md.",
        ),
        _alert(
            "GpulensJobLowUsefulWork",
            "low_useful_work",
            f"avg_over_time(job_id:gpulens_useful_work_ratio:avg[1h]) < {LOW_USEFUL_WORK:g}",
            "1h",
            "info",
            "Job {{ $labels.job_id }} ({{ $labels.user }}) did little useful work for an hour",
            "Its GPUs' useful work (busiest math pipe at full clock) averaged "
            "{{ $value | humanizePercentage }} over the last hour, below "
            f"{LOW_USEFUL_WORK:.0%} (jobstats' red line). Its findings say why.",
        ),
        _alert(
            "GpulensAgentStale",
            "agent_health",
            "time() - gpulens_last_tick_timestamp_seconds > 60",
            "5m",
            "warning",
            "The gpulens agent on {{ $labels.instance }} stopped collecting",
            "Its last collection tick is {{ $value | humanizeDuration }} old.",
        ),
        _alert(
            "GpulensCollectorDown",
            "agent_health",
            "gpulens_collector_up == 0",
            "10m",
            "warning",
            "Collector {{ $labels.collector }} of the gpulens agent on {{ $labels.instance }} "
            "is failing",
            "Its runs raise or time out: `gpulens doctor` on the node says why.",
        ),
    ]
    return [
        {"name": "gpulens.recording", "rules": recording},
        {"name": "gpulens.alerts", "rules": alerts},
    ]


# -- dcgm-exporter's metrics ------------------------------------------------------------------
def dcgm_names(field_id: int) -> list[str]:
    """Every name dcgm-exporter may give field `field_id` (pre-4.6 first), upper case."""
    first = catalog.BY_DCGM_ID[field_id].dcgm_name
    names = sorted(name for name, fid in FIELD_IDS.items() if fid == field_id)
    return [n for n in names if n == first] + [n for n in names if n != first]


def dcgm(field_ids: int | Sequence[int], matchers: str = "") -> str:
    """A selector for the fields under all their names: `NAME{m}` or `{__name__=~"A|B",m}`."""
    ids = [field_ids] if isinstance(field_ids, int) else list(field_ids)
    names = [n for fid in ids for n in dcgm_names(fid)]
    if len(names) == 1:
        return f"{names[0]}{{{matchers}}}" if matchers else names[0]
    extra = f",{matchers}" if matchers else ""
    return f'{{__name__=~"{"|".join(names)}"{extra}}}'


GPU_UTIL, FB_FREE, FB_USED = 203, 251, 252
POWER_VIOLATION, THERMAL_VIOLATION = 240, 241
GR_ENGINE_ACTIVE, SM_ACTIVE, TENSOR_ACTIVE = 1001, 1002, 1004
FP64_ACTIVE, FP32_ACTIVE, FP16_ACTIVE = 1006, 1007, 1008
#: who holds a GPU on dcgm-exporter's labels: a Slurm job (`hpc_job`, with the `user` a site's
#: relabelling may add), else a Kubernetes pod
_DCGM_WHO = (
    "{{ if $labels.hpc_job }}job {{ $labels.hpc_job }}"
    "{{ if $labels.user }} of {{ $labels.user }}{{ end }}"
    "{{ else }}pod {{ $labels.namespace }}/{{ $labels.pod }}{{ end }}"
)


def dcgm_groups(idle_for: str = DEFAULT_IDLE_FOR) -> list[Group]:
    """Recording and alerting rules over dcgm-exporter's `DCGM_FI_*` series only."""
    th = Thresholds()
    on = f"on ({DCGM_GPU_KEY})"
    useful = "gpu:gpulens_dcgm_useful_work_ratio:max_pipe"
    recording = [
        _record("fleet:gpulens_dcgm_gpu_util_ratio:avg", f"avg({dcgm(GPU_UTIL)}) / 100"),
        _record("fleet:gpulens_dcgm_sm_active_ratio:avg", f"avg({dcgm(SM_ACTIVE)})"),
        _record("fleet:gpulens_dcgm_tensor_active_ratio:avg", f"avg({dcgm(TENSOR_ACTIVE)})"),
        _record(
            useful,
            f"max without () ({dcgm((TENSOR_ACTIVE, FP64_ACTIVE, FP32_ACTIVE, FP16_ACTIVE))})",
        ),
        _record("fleet:gpulens_dcgm_useful_work_ratio:avg", f"avg({useful})"),
    ]
    alerts = [
        _alert(
            "GpulensGpuIdleAllocated",
            "idle_allocated",
            f"""
            ({dcgm(FB_USED)} > {IDLE_FB_USED_MIB})
            and {on}
            ({dcgm(GPU_UTIL)} == 0)
            """,
            idle_for,
            "warning",
            f"{_WHERE} ({_DCGM_WHO}) holds memory and has done no work for more than {idle_for}",
            f"More than {IDLE_FB_USED_MIB} MiB of GPU memory in use while GPU_UTIL is 0. Release "
            "the GPU: end the idle session or job, or turn on the notebook idle culler.",
        ),
        _alert(
            "GpulensGpuHollowBusy",
            "hollow_busy",
            f"""
            ({dcgm(GPU_UTIL)} > {th.duty_busy * 100:g})
            and {on}
            ({dcgm(SM_ACTIVE)} < {th.sm_low:g} or {dcgm(GR_ENGINE_ACTIVE)} < {th.sm_low:g})
            """,
            "15m",
            "info",
            f"{_WHERE} ({_DCGM_WHO}) looks busy but its SMs are mostly empty",
            f"GPU_UTIL > {th.duty_busy:.0%} while SM activity (or graphics-engine activity, its "
            f"upper bound) < {th.sm_low:g}: kernels too small or launches too sparse.",
        ),
        _alert(
            "GpulensGpuThrottled",
            "throttled",
            f"""
            (
              sum without () (rate({dcgm((POWER_VIOLATION, THERMAL_VIOLATION))}[5m])) / 1e9
                > {th.throttle_fraction:g}
            )
            and {on}
            ({dcgm(GPU_UTIL)} > {th.busy_min * 100:g})
            """,
            "10m",
            "warning",
            f"{_WHERE} ({_DCGM_WHO}) is held below its clock by power or heat",
            f"Clocks were held down by the power cap or by temperature more than "
            f"{th.throttle_fraction:.0%} of the time while busy (needs DCGM_FI_DEV_POWER_VIOLATION "
            "and DCGM_FI_DEV_THERMAL_VIOLATION in dcgm-exporter's counters file).",
        ),
        _alert(
            "GpulensGpuMemoryLeak",
            "memory_leak",
            f"""
            delta({dcgm(FB_USED)}[30m]) > {LEAK_GROWTH_MIB}
            and
            predict_linear({dcgm(FB_USED)}[30m], {LEAK_HORIZON_S})
              > {on} ({dcgm(FB_USED)} + {on} {dcgm(FB_FREE)})
            """,
            "1h",
            "warning",
            f"GPU memory of {_DCGM_WHO} on {_WHERE} keeps growing",
            "Memory in use grew by {{ $value }} MiB in 30 minutes, for an hour, on a line that "
            f"fills the GPU within {LEAK_HORIZON_S // 3600} hours.",
        ),
        _alert(
            "GpulensJobLowUsefulWork",
            "low_useful_work",
            f"""
            avg by (namespace, pod, hpc_job) (avg_over_time({useful}{{pod!=""}}[1h]))
              < {LOW_USEFUL_WORK:g}
            or
            avg by (namespace, pod, hpc_job) (avg_over_time({useful}{{hpc_job!=""}}[1h]))
              < {LOW_USEFUL_WORK:g}
            """,
            "1h",
            "info",
            "Pod {{ $labels.namespace }}/{{ $labels.pod }}{{ $labels.hpc_job }} did little "
            "useful work for an hour",
            "Its GPUs' busiest math pipe was active {{ $value | humanizePercentage }} of the "
            f"time over the last hour, below {LOW_USEFUL_WORK:.0%} (only the pipes "
            "dcgm-exporter writes count: the default counters file has the tensor pipe only).",
        ),
    ]
    return [
        {"name": "gpulens-dcgm.recording", "rules": recording},
        {"name": "gpulens-dcgm.alerts", "rules": alerts},
    ]


def rule_groups(idle_for: str = DEFAULT_IDLE_FOR, dcgm: bool = False) -> list[Group]:
    """The rule groups for the agent's metrics, or for dcgm-exporter's with `dcgm=True`."""
    check_duration(idle_for)
    return dcgm_groups(idle_for) if dcgm else agent_groups(idle_for)


# -- YAML ----------------------------------------------------------------------------------------
def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    plain = _PLAIN.fullmatch(text) and text.lower() not in _NOT_PLAIN
    if plain or (text and _DURATION.fullmatch(text)):
        return text
    if text.isprintable():
        return "'" + text.replace("'", "''") + "'"
    return json.dumps(text, ensure_ascii=False)  # a YAML double-quoted scalar


def _literal(text: str) -> bool:
    """True when `text` reads back unchanged from a `|-` block."""
    lines = text.split("\n")
    return (
        not text.startswith((" ", "\n"))
        and not text.endswith("\n")
        and all(line.isprintable() and line == line.rstrip() for line in lines)
    )


def _lines(value: object, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            head = f"{pad}{_scalar(key)}:"
            if isinstance(item, str) and "\n" in item and _literal(item):
                out.append(f"{head} |-")
                out += [f"{pad}  {line}" if line else "" for line in item.split("\n")]
            elif isinstance(item, Mapping | list) and item:
                out.append(head)
                out += _lines(item, indent + 2)
            elif isinstance(item, Mapping | list):
                out.append(f"{head} {'{}' if isinstance(item, Mapping) else '[]'}")
            else:
                out.append(f"{head} {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping | list) and item:
                nested = _lines(item, indent + 2)
                out.append(f"{pad}- {nested[0][indent + 2 :]}")
                out += nested[1:]
            else:
                out.append(f"{pad}- {_scalar(item)}")
    else:
        out.append(pad + _scalar(value))
    return out


def to_yaml(value: object) -> str:
    """Block-style YAML of dicts, lists, strings and numbers (multi-line strings as `|-`)."""
    return "\n".join(_lines(value, 0)) + "\n"


def rules_yaml(idle_for: str = DEFAULT_IDLE_FOR, dcgm: bool = False) -> str:
    """The rule file's text."""
    source = "dcgm-exporter's DCGM_FI_* series" if dcgm else "the gpulens agent's series"
    header = (
        f"# Prometheus rules for {source}, written by `gpulens rules"
        f"{' --dcgm' if dcgm else ''} --idle-for {idle_for}`.\n"
        "# Regenerate rather than edit: see docs/prometheus.md.\n"
    )
    return header + to_yaml({"groups": rule_groups(idle_for, dcgm)})


def write_rules(output: Path, idle_for: str = DEFAULT_IDLE_FOR, dcgm: bool = False) -> list[Path]:
    """Write the rule file (and, for the agent's metrics, the Grafana dashboard) into
    `output`; returns the paths written."""
    text = rules_yaml(idle_for, dcgm)
    output.mkdir(parents=True, exist_ok=True)
    rules_path = output / (DCGM_RULES_FILE if dcgm else RULES_FILE)
    rules_path.write_text(text, encoding="utf-8")
    written = [rules_path]
    if not dcgm:
        dashboard_path = output / DASHBOARD_FILE
        dashboard_path.write_text(grafana.dashboard_json(), encoding="utf-8")
        written.append(dashboard_path)
    return written


def examples() -> dict[str, str]:
    """The files committed under docs/, by path relative to docs/."""
    return {
        f"prometheus/{RULES_FILE}": rules_yaml(),
        f"prometheus/{DCGM_RULES_FILE}": rules_yaml(dcgm=True),
        f"grafana/{DASHBOARD_FILE}": grafana.dashboard_json(),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Write the examples into the docs directory (default: ./docs)."""
    args = list(sys.argv[1:] if argv is None else argv)
    docs = Path(args[0]) if args else Path("docs")
    for rel, text in examples().items():
        path = docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
