"""The idle-escalation ladder (analyze/escalation.py): spells from a classified frame, and the
decisions: exemptions, warning before acting, a warning lost when the job worked again,
notice, commands built without a shell."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from gpulens.analyze.escalation import (
    Exemptions,
    IdleSpell,
    Past,
    Policy,
    check_template,
    command_args,
    decide,
    history,
    idle_spells,
)
from gpulens.errors import ConfigError

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
MIN = 60 * NS


def _frame(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows of (minute, state, labels) → a classified interval frame at a 60 s step."""
    out = []
    for r in rows:
        out.append({"start_ns": T0 + r["minute"] * MIN, "step_s": 60.0, "state": r["state"],
                    "host": r.get("host", "n1"), "gpu_uuid": r.get("gpu", "GPU-0"),
                    "job_id": r.get("job"), "user": r.get("user"), "pod": r.get("pod"),
                    "namespace": r.get("namespace")})  # fmt: skip
    return pa.Table.from_pylist(out)


def _rows(minutes: range, state: str, **labels: Any) -> list[dict[str, Any]]:
    return [{"minute": m, "state": state, **labels} for m in minutes]


def test_a_job_is_idle_when_all_its_gpus_are() -> None:
    frame = _frame(
        _rows(range(0, 10), "compute_tensor", job="7", gpu="GPU-0")
        + _rows(range(10, 100), "idle_allocated", job="7", gpu="GPU-0")
        + _rows(range(0, 30), "compute_tensor", job="7", gpu="GPU-1")
        + _rows(range(30, 100), "idle_allocated", job="7", gpu="GPU-1", user="ana")
    )
    (spell,) = idle_spells(frame)
    assert spell.key == "job:7"
    assert spell.since_ns == T0 + 30 * MIN and spell.until_ns == T0 + 100 * MIN
    assert spell.idle_s == 70 * 60 and not spell.open_start
    assert spell.labels == {"job_id": "7", "user": "ana", "host": "n1", "gpu_uuid": "GPU-0,GPU-1"}


def test_one_working_gpu_means_the_job_is_not_idle_now() -> None:
    frame = _frame(
        _rows(range(0, 100), "idle_allocated", job="7", gpu="GPU-0")
        + _rows(range(0, 99), "idle_allocated", job="7", gpu="GPU-1")
        + _rows(range(99, 100), "compute_fp32", job="7", gpu="GPU-1")
    )
    assert idle_spells(frame) == []


def test_a_gap_in_the_data_restarts_the_spell_and_a_gone_job_has_none() -> None:
    frame = _frame(
        _rows(range(0, 40), "idle_allocated", job="8")
        + _rows(range(45, 100), "idle_allocated", job="8")  # 5 minutes of no data
        + _rows(range(0, 50), "idle_allocated", job="9", gpu="GPU-1")  # ended at 50
        + _rows(range(0, 100), "compute_tensor", job="10", gpu="GPU-2")
    )
    (spell,) = idle_spells(frame)
    assert spell.key == "job:8" and spell.since_ns == T0 + 45 * MIN


def test_holders_without_a_job_and_idle_since_the_window_start() -> None:
    frame = _frame(
        _rows(range(0, 20), "idle_allocated", pod="nb", namespace="lab", gpu="GPU-3")
        + _rows(range(0, 20), "idle_allocated", gpu="GPU-4", host="n2")
        + _rows(range(0, 20), "idle_unallocated", gpu="GPU-5")
    )
    spells = {s.key: s for s in idle_spells(frame)}
    assert set(spells) == {"pod:lab/nb", "gpu:n2/GPU-4"}
    assert all(s.open_start and s.idle_s == 20 * 60 for s in spells.values())


def _spell(minutes: float, key: str = "job:5", since_min: float = 0, **labels: str) -> IdleSpell:
    since = T0 + round(since_min * MIN)
    return IdleSpell(key, since, since + round(minutes * MIN), False,
                     {"job_id": key.removeprefix("job:"), "user": "ana", **labels})  # fmt: skip


POLICY = Policy(warn_s=3600, act_s=7200, command="scancel {job}", act_enabled=True, dry_run=False)


def test_warn_then_act_after_the_notice() -> None:
    now = T0 + 130 * MIN
    (first,) = decide([_spell(130)], {}, POLICY, now)
    assert (first.level, first.run, first.record) == ("warn", False, True)
    assert "never warned" in first.reason
    warned = {"job:5": Past(warned_ns=now)}
    (early,) = decide([_spell(150)], warned, POLICY, now + 20 * MIN)
    assert early.level == "warn" and not early.run and not early.record  # 20 of 60 min notice
    (late,) = decide([_spell(190)], warned, POLICY, now + 60 * MIN)
    assert (late.level, late.run, late.command) == ("act", True, ("scancel", "5"))
    acted = {"job:5": Past(warned_ns=now, acted_ns=now + 60 * MIN, acted_ok=True)}
    (again,) = decide([_spell(200)], acted, POLICY, now + 70 * MIN)
    assert again.level == "act" and not again.run and "already acted" in again.reason


def test_a_job_that_worked_after_its_warning_is_warned_anew() -> None:
    warned = {"job:5": Past(warned_ns=T0 + 70 * MIN)}
    # idle 130 min since minute 80: the warning at 70 came before it worked again
    (action,) = decide([_spell(130, since_min=80)], warned, POLICY, T0 + 210 * MIN)
    assert action.level == "warn" and not action.run and action.record
    assert "worked after" in action.reason


@pytest.mark.parametrize(
    ("exemptions", "labels", "why"),
    [
        (Exemptions(users=frozenset({"ana"})), {}, "user 'ana'"),
        (Exemptions(qos=frozenset({"long"})), {"qos": "long"}, "QoS 'long'"),
        (Exemptions(partitions=frozenset({"dbg"})), {"partition": "gpu,dbg"}, "partition 'dbg'"),
        (Exemptions(namespaces=frozenset({"prod"})), {"namespace": "prod"}, "namespace 'prod'"),
    ],
)
def test_an_exempt_job_is_never_acted_on(
    exemptions: Exemptions, labels: dict[str, str], why: str
) -> None:
    policy = Policy(3600, 7200, act_enabled=True, dry_run=False, exemptions=exemptions)
    warned = {"job:5": Past(warned_ns=T0)}
    (action,) = decide([_spell(500, **labels)], warned, policy, T0 + 500 * MIN)
    assert action.exempt and why in action.reason
    assert (action.run, action.record, action.command) == (False, False, None)


def test_the_command_runs_only_when_enabled_and_not_a_dry_run() -> None:
    warned = {"job:5": Past(warned_ns=T0)}
    now = T0 + 300 * MIN
    for enabled, dry, runs in ((True, True, False), (False, False, False), (True, False, True)):
        policy = Policy(3600, 7200, act_enabled=enabled, dry_run=dry)
        (action,) = decide([_spell(300)], warned, policy, now)
        assert action.level == "act" and action.run is runs
        assert action.command == ("scancel", "5")
        assert action.record is (not dry)


def test_below_the_warning_level_nothing_is_said() -> None:
    assert decide([_spell(59)], {}, POLICY, T0 + 59 * MIN) == []


def test_commands_are_argument_lists_never_shell_lines() -> None:
    args, _ = command_args(
        "kubectl delete pod {pod} -n {namespace}", {"pod": "a;rm -rf /", "namespace": "x y"}
    )
    assert args == ("kubectl", "delete", "pod", "a;rm -rf /", "-n", "x y")
    args, why = command_args("scancel {job}", {"job": "--signal=KILL"})
    assert args is None and "option-like" in why
    args, why = command_args("scancel {job}", {"pod": "p"})
    assert args is None and "{job}" in why
    args, why = command_args("scancel {job}", {"job": "1\n2"})
    assert args is None


@pytest.mark.parametrize(
    ("template", "match"),
    [
        ("scancel {job.__class__}", "use only plain"),
        ("scancel {jobid}", "use only plain"),
        ("scancel {job!r}", "use only plain"),
        ("scancel '{job}", "does not split"),
        ("  ", "is empty"),
        ("scancel {job", "not a template"),
    ],
)
def test_bad_templates_are_config_errors(template: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_template(template, "enforce.command")
    with pytest.raises(ConfigError, match=match):
        Policy(3600, 7200, command=template)


def test_levels_must_rise() -> None:
    with pytest.raises(ConfigError, match="rising"):
        Policy(7200, 3600)


def test_history_keeps_the_latest_warning_and_action() -> None:
    records: list[dict[str, object]] = [
        {"key": "job:1", "ts_ns": 10, "level": "warn"},
        {"key": "job:1", "ts_ns": 30, "level": "warn"},
        {"key": "job:1", "ts_ns": 40, "level": "act", "ran": True, "exit_code": 1},
        {"key": "job:2", "ts_ns": 50, "level": "act", "ran": True, "exit_code": 0},
        {"key": "job:3", "ts_ns": "bad", "level": "warn"},
    ]
    past = history(records)
    assert past["job:1"] == Past(warned_ns=30, acted_ns=40, acted_ok=False)
    assert past["job:2"] == Past(acted_ns=50, acted_ok=True)
    assert "job:3" not in past


def test_a_job_that_may_be_exempt_is_not_acted_on() -> None:
    policy = Policy(3600, 7200, act_enabled=True, dry_run=False,
                    exemptions=Exemptions(qos=frozenset({"long"})))  # fmt: skip
    warned = {"job:5": Past(warned_ns=T0)}
    (action,) = decide([_spell(300)], warned, policy, T0 + 300 * MIN)  # no QoS label
    assert action.level == "act" and not action.run and "QoS is unknown" in action.reason
    (action,) = decide([_spell(300, qos="normal")], warned, policy, T0 + 300 * MIN)
    assert action.run
