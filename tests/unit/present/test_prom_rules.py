"""`gpulens rules`: the rule files and the Grafana dashboard, and the examples under docs/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpulens import catalog
from gpulens.errors import ConfigError
from gpulens.findings.engine import RULES
from gpulens.model import Kind
from gpulens.present.prometheus import grafana
from gpulens.present.prometheus import rules as prom_rules
from gpulens.present.prometheus.exporter import PREFIX

DOCS = Path(__file__).resolve().parents[3] / "docs"
#: series the exporter writes besides the catalog's GPU metrics
DERIVED = {
    "gpulens_gpu_state",
    "gpulens_useful_work_ratio",
    "gpulens_wasted_gpu_seconds_total",
    "gpulens_headroom_gpu_seconds_total",
    "gpulens_gpu_hour_price",
    "gpulens_findings_active",
    "gpulens_collector_up",
    "gpulens_last_tick_timestamp_seconds",
}
SERIES = re.compile(r"\b(?:gpulens_|DCGM_FI_)[A-Za-z0-9_]+|\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+")


def exported() -> set[str]:
    names = set(DERIVED)
    for m in catalog.metrics_of(Kind.GPU):
        counter = m.type == "counter" and not m.name.endswith("_total")
        names.add(PREFIX + m.name + ("_total" if counter else ""))
    return names


@pytest.mark.parametrize("rel", sorted(prom_rules.examples()))
def test_committed_examples_are_current(rel: str) -> None:
    path = DOCS / rel
    fix = "run `python -m gpulens.present.prometheus.rules`"
    assert path.exists(), f"{path} is missing: {fix}"
    assert path.read_text(encoding="utf-8") == prom_rules.examples()[rel], f"{path} is stale: {fix}"


@pytest.mark.parametrize("dcgm", [False, True])
def test_yaml_reads_back_as_the_rules(dcgm: bool) -> None:
    yaml = pytest.importorskip("yaml")
    text = prom_rules.rules_yaml("45m", dcgm=dcgm)
    assert yaml.safe_load(text) == {"groups": prom_rules.rule_groups("45m", dcgm=dcgm)}


def test_yaml_quotes_what_would_not_read_back_as_text() -> None:
    yaml = pytest.importorskip("yaml")
    value = {
        "a": ["on", "yes", "1.5", "30m", "x: y", "it's", "{{ $labels.x }}", "#no", ""],
        "b": {"n": 3, "f": 0.25, "t": True, "e": [], "d": {}},
        "c": "line one\n  indented\n\nlast",
        "d": " lead\ntrail \n",
        "e": "tab\there",
    }
    assert yaml.safe_load(prom_rules.to_yaml(value)) == value


@pytest.mark.parametrize(
    "text", ["", "30", "0m", "0h0m", "5 m", "-5m", "1.5h", "5M", "30m1h", "1h1h"]
)
def test_idle_for_must_be_a_prometheus_duration(text: str) -> None:
    with pytest.raises(ConfigError, match="duration"):
        prom_rules.rule_groups(text)


@pytest.mark.parametrize("text", ["90s", "1h30m", "2d", "1w", "500ms", "1h0m"])
def test_idle_for_accepts_prometheus_durations(text: str) -> None:
    assert prom_rules.check_duration(text) == text


def test_idle_for_is_the_idle_alert_s_for() -> None:
    for dcgm in (False, True):
        rules = [r for g in prom_rules.rule_groups("1h30m", dcgm=dcgm) for r in g["rules"]]
        idle = next(r for r in rules if r.get("alert") == "GpulensGpuIdleAllocated")
        assert idle["for"] == "1h30m" and "1h30m" in idle["annotations"]["summary"]


@pytest.mark.parametrize("dcgm", [False, True])
def test_alerts_carry_severity_and_the_finding_rule(dcgm: bool) -> None:
    groups = prom_rules.rule_groups(dcgm=dcgm)
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {a["labels"]["rule_id"] for a in alerts} >= {
        "idle_allocated",
        "hollow_busy",
        "throttled",
        "memory_leak",
        "low_useful_work",
    }
    for a in alerts:
        assert a["labels"]["severity"] in {"info", "warning", "critical"}
        assert a["annotations"]["summary"] and a["annotations"]["description"]
        rule = a["labels"]["rule_id"]
        assert rule in RULES or rule in {"low_useful_work", "agent_health"}
        if rule in RULES and "docs/findings/" in a["annotations"]["description"]:
            assert (DOCS / "findings" / f"{rule}.md").exists()
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names))


def test_agent_rules_and_dashboard_read_series_the_agent_writes() -> None:
    groups = prom_rules.rule_groups()
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    known = exported() | recorded
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    exprs += [q for _, q in grafana.queries(grafana.dashboard())]
    for expr in exprs:
        unknown = set(SERIES.findall(expr)) - known
        assert not unknown, (unknown, expr)
        assert "DCGM_FI_" not in expr


def test_dcgm_rules_read_only_dcgm_exporter_series() -> None:
    groups = prom_rules.rule_groups(dcgm=True)
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    for g in groups:
        for r in g["rules"]:
            for name in SERIES.findall(r["expr"]):
                assert name.startswith("DCGM_FI_") or name in recorded, (name, r["expr"])
    text = prom_rules.rules_yaml(dcgm=True)
    # both spellings of a renamed field (DCGM 4.6), and the units dcgm-exporter writes
    assert "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO" in text
    assert "DCGM_FI_DEV_FB_USED > 1024" in text and "> 80" in text and "/ 1e9" in text


def test_write_rules_writes_the_files(tmp_path: Path) -> None:
    written = prom_rules.write_rules(tmp_path / "out", idle_for="5s")
    assert [p.name for p in written] == [prom_rules.RULES_FILE, prom_rules.DASHBOARD_FILE]
    assert "for: 5s" in written[0].read_text(encoding="utf-8")
    assert json.loads(written[1].read_text(encoding="utf-8"))["uid"] == grafana.UID
    (dcgm,) = prom_rules.write_rules(tmp_path / "out", dcgm=True)
    assert dcgm.name == prom_rules.DCGM_RULES_FILE


def test_dashboard_model() -> None:
    model = grafana.dashboard()
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert set(variables) == {"datasource", "Hostname", "user", "job_id"}
    assert variables["datasource"]["type"] == "datasource"
    assert all(variables[v]["allValue"] == ".*" for v in ("Hostname", "user", "job_id"))
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in model["panels"]}
    assert {"Useful work versus duty cycle", "SM activity by engine", "Per user", "Per job"} <= (
        titles
    )
    assert any("cause" in p["title"].lower() for p in model["panels"])
    for panel in model["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
    for _, expr in grafana.queries(model):
        if "gpulens_gpu_util_ratio" in expr or "gpulens_useful_work_ratio" in expr:
            assert '"$user"' in expr or "$Hostname" in expr, expr
    assert json.loads(grafana.dashboard_json()) == model
