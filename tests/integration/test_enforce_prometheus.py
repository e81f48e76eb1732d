"""`gpulens enforce` against Debian's Prometheus on loopback, over dcgm-exporter series whose
idle spells are known by construction (tests/idlecluster.py, backfilled with promtool).

Six hours of eight GPUs (minutes from the start):
- job 101 (alice, partition gpu): two GPUs idle throughout;
- job 102 (bob): trains until 60, idle 60-140, trains 140-150, idle from 150;
- job 103 (carol, an exempt user) and job 104 (dave, in the exempt partition debug): idle;
- job 105 (eve): trains throughout;
- pod research/nb-1 (no Slurm job, partition gpu): idle;
- job "106;touch INJECTED" (mallory): idle, with shell syntax in its job label.

Enforcement runs at several moments of that history (`now_ns`), with the audit log carried
from one run to the next, and a real command (a script that appends its arguments to a file).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from promdata import PROMETHEUS, PROMTOOL, Prometheus

pytestmark = pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()),
    reason="needs Debian's prometheus and promtool (apt-get install prometheus)",
)

START_S = 1_791_676_800  # 2026-10-11T00:00:00Z
MINUTES = 360
NS = 1_000_000_000
INJECTED = "106;touch INJECTED"


def _gpus() -> list[Any]:
    from idlecluster import Gpu

    def job(job_id: str, user: str) -> dict[str, str]:
        return {"hpc_job": job_id, "user": user}

    return [
        Gpu("node-a", 0, "gpu", job("101", "alice")),
        Gpu("node-a", 1, "gpu", job("101", "alice")),
        Gpu("node-a", 2, "gpu", job("102", "bob"),
            ((0, "train"), (60, "idle"), (140, "train"), (150, "idle"))),
        Gpu("node-a", 3, "gpu", job("103", "carol")),
        Gpu("node-b", 0, "debug", job("104", "dave")),
        Gpu("node-b", 1, "debug", job("105", "eve"), ((0, "train"),)),
        Gpu("node-c", 1, "gpu", {"pod": "nb-1", "namespace": "research"}),
        Gpu("node-c", 0, "gpu", job(INJECTED, "mallory")),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    from idlecluster import backfill

    home = tmp_path_factory.mktemp("enforce-prom")
    backfill(_gpus(), START_S, MINUTES, home / "data", home)
    with Prometheus(home, home / "data") as prom:
        yield prom


@dataclass
class Setup:
    data_dir: Path
    calls: Path
    script: Path


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    script = tmp_path / "act.py"
    calls = tmp_path / "calls.jsonl"
    script.write_text(
        "import json, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)  # where `touch INJECTED` would land, were a shell involved
    return Setup(tmp_path / "store", calls, script)


def _config(setup: Setup, **extra: Any) -> Any:
    from gpulens.config import load_config

    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(setup.script))} {{job}} {{user}}"
    overrides = {
        "data_dir": str(setup.data_dir),
        "enforce.command": command + " {partition}",
        "enforce.act_enabled": True,
        "enforce.exempt_users": ["carol"],
        "enforce.exempt_partitions": ["debug"],
        **extra,
    }
    return load_config(None, env={}, overrides=overrides)


def _run(cfg: Any, url: str, minute: float, dry_run: bool = False, **kw: Any) -> dict[str, Any]:
    from gpulens.app.enforce import enforce

    run = enforce(cfg, now_ns=(START_S + round(minute * 60)) * NS, dry_run=dry_run,
                  prometheus_url=url, **kw)  # fmt: skip
    return {_who(o.action.spell.labels): o for o in run.outcomes}


def _who(labels: Any) -> str:
    return labels.get("job_id") or f"{labels.get('namespace')}/{labels.get('pod')}"


def _calls(setup: Setup) -> list[list[str]]:
    if not setup.calls.exists():
        return []
    return [json.loads(line) for line in setup.calls.read_text().splitlines()]


def _audit(setup: Setup) -> list[dict[str, Any]]:
    path = setup.data_dir / "enforce-audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_warn_then_act_with_exemptions_and_a_job_that_worked_again(
    prometheus: Prometheus, setup: Setup
) -> None:
    cfg = _config(setup)
    # 130 min: everything idle past 60 min is warned; nothing is acted on before a warning
    a = _run(cfg, prometheus.url, 130)
    assert {k: (o.action.level, o.action.exempt) for k, o in a.items()} == {
        "101": ("warn", False), "102": ("warn", False), "research/nb-1": ("warn", False),
        INJECTED: ("warn", False),
        # exempt: listed at the level their idle time reaches, never warned or acted on
        "103": ("act", True), "104": ("act", True),
    }  # fmt: skip
    assert a["101"].action.spell.labels["gpu_uuid"].count(",") == 1  # both of its GPUs
    assert a["101"].action.spell.idle_s == pytest.approx(130 * 60, abs=90)
    assert a["102"].action.spell.idle_s == pytest.approx(70 * 60, abs=90)
    assert a["103"].action.exempt and "carol" in a["103"].action.reason
    assert a["104"].action.exempt and "debug" in a["104"].action.reason
    assert not any(o.ran for o in a.values()) and _calls(setup) == []
    warned = {r["key"] for r in _audit(setup)}
    assert warned == {"job:101", "job:102", "pod:research/nb-1", f"job:{INJECTED}"}

    # 200 min: 101 was warned 70 min ago (>= 120 - 60) and is still idle: acted on; 102 worked
    # 140-150 and has been idle 50 min since: nothing
    b = _run(cfg, prometheus.url, 200)
    assert "102" not in b
    assert b["101"].action.level == "act" and b["101"].ran and b["101"].exit_code == 0
    assert ["101", "alice", "gpu"] in _calls(setup)
    # the label with shell syntax is one argument of the command, and no shell ran it
    assert b[INJECTED].ran and [INJECTED, "mallory", "gpu"] in _calls(setup)
    assert not Path("INJECTED").exists()
    # the pod has no job for `scancel {job}`: at the act level, but nothing can run
    assert b["research/nb-1"].action.level == "act" and not b["research/nb-1"].ran
    assert "{job}" in b["research/nb-1"].action.reason
    for exempt in ("103", "104"):
        assert b[exempt].action.exempt and b[exempt].action.level == "act" and not b[exempt].ran

    # 300 min: 102 has been idle 150 min, but its warning (130) came before it worked again:
    # warned anew, not acted on
    c = _run(cfg, prometheus.url, 300)
    assert c["102"].action.level == "warn" and not c["102"].ran
    assert "worked after" in c["102"].action.reason
    assert not c["101"].ran  # acted on once in this spell already
    assert sum(1 for call in _calls(setup) if call[0] == "102") == 0

    # 360 min: 102's new warning is 60 min old and it is still idle: acted on
    d = _run(cfg, prometheus.url, 360)
    assert d["102"].action.level == "act" and d["102"].ran
    assert ["102", "bob", "gpu"] in _calls(setup)
    # the exempt jobs were never acted on, in any run
    assert {call[0] for call in _calls(setup)} == {"101", "102", INJECTED}
    levels = [(r["key"], r["level"], r["ran"]) for r in _audit(setup)]
    assert ("job:102", "warn", False) in levels and ("job:102", "act", True) in levels
    assert not any(k in ("job:103", "job:104") for k, _, _ in levels)


def test_commands_run_only_when_enabled_and_not_a_dry_run(
    prometheus: Prometheus, setup: Setup
) -> None:
    off = _config(setup, **{"enforce.act_enabled": False})
    _run(off, prometheus.url, 130)  # the warnings are recorded
    warnings = len(_audit(setup))
    # a dry run at the act level: the command is shown, not run, and nothing is recorded
    dry = _run(_config(setup), prometheus.url, 200, dry_run=True)
    assert dry["101"].action.level == "act" and dry["101"].action.command is not None
    assert not dry["101"].ran and "dry run" in dry["101"].action.reason
    assert len(_audit(setup)) == warnings
    # acting off: recorded as an action not run, and still nothing runs
    disabled = _run(off, prometheus.url, 200)
    assert disabled["101"].action.level == "act" and not disabled["101"].ran
    assert "act_enabled" in disabled["101"].action.reason
    acts = [r for r in _audit(setup) if r["level"] == "act"]
    assert acts and not any(r["ran"] for r in acts)
    assert _calls(setup) == []
    # enabled and not a dry run: it runs
    on = _run(_config(setup), prometheus.url, 200)
    assert on["101"].ran and ["101", "alice", "gpu"] in _calls(setup)


def test_qos_exemption_from_squeue_and_jobs_squeue_no_longer_runs(
    prometheus: Prometheus, setup: Setup, shared: Path
) -> None:
    from gpulens.collect.scheduler.slurm_jobs import parse_job_details

    # a real squeue --json (data_parser v0.0.44) with its running job renamed to ours
    real = shared / ("data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd/25.11/0.0.44/"
                     "slurm-job-gpus-running.json")  # fmt: skip
    doc = json.loads(real.read_text())
    template = doc["jobs"][0]
    jobs = []
    for job_id, user, qos, state in (("101", "alice", "long", "RUNNING"),
                                     ("102", "bob", "normal", "COMPLETED")):  # fmt: skip
        jobs.append({**template, "job_id": int(job_id), "user_name": user, "qos": qos,
                     "job_state": [state]})  # fmt: skip
    details = parse_job_details({**doc, "jobs": jobs}, "squeue")
    cfg = _config(setup, **{"enforce.exempt_qos": ["long"]})
    _run(cfg, prometheus.url, 130, jobs=details)
    b = _run(cfg, prometheus.url, 200, jobs=details)
    assert b["101"].action.exempt and "QoS 'long'" in b["101"].action.reason
    assert "102" not in b  # not running in squeue: left alone
    # jobs squeue does not list are left alone too (the pod has no job: still judged)
    assert INJECTED not in b and "research/nb-1" in b
    assert _calls(setup) == []


def test_cli_json_dry_run_by_default(prometheus: Prometheus, setup: Setup) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    config = setup.data_dir.parent / "gpulens.toml"
    config.write_text(
        f'data_dir = {json.dumps(str(setup.data_dir))}\n[enforce]\nexempt_users = ["carol"]\n'
    )
    at = "2026-10-11T03:20:00Z"  # minute 200
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "enforce", "--prometheus", prometheus.url,
         "--at", at, "--format", "json", "--config", str(config)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True and doc["act_enabled"] is False
    assert (doc["warn_minutes"], doc["act_minutes"]) == (60, 120)
    by_job = {a["subject"]["job"]: a for a in doc["actions"]}
    a101 = by_job["101"]
    assert set(a101) >= {"subject", "idle_minutes", "level", "command", "exempt", "reason"}
    assert set(a101["subject"]) >= {"job", "pod", "user", "gpu"}
    assert a101["subject"]["user"] == "alice" and a101["subject"]["gpu"].startswith("GPU-")
    # never warned before (nothing recorded: dry runs record nothing): a warning, not an act
    assert a101["level"] == "warn" and a101["idle_minutes"] >= 120 and not a101["ran"]
    # its price: two GPUs × the idle time, at the configured H100 GPU-hour price
    from gpulens.app import session
    from gpulens.config import load_config

    price = session.prices(load_config(config, env={})).gpu_hour_price("NVIDIA H100 80GB HBM3")
    assert a101["gpus"] == 2
    assert a101["idle_gpu_hours"] == pytest.approx(2 * a101["idle_minutes"] / 60, abs=0.01)
    assert a101["idle_cost"] == pytest.approx(a101["idle_gpu_hours"] * price, rel=0.01)
    assert a101["idle_cost"] > 0 and doc["currency"]
    assert by_job["103"]["exempt"] is True and by_job["103"]["command"] is None
    assert not (setup.data_dir / "enforce-audit.jsonl").exists()


def test_enforce_on_a_store_ingested_from_prometheus(prometheus: Prometheus, setup: Setup) -> None:
    from gpulens.app.enforce import enforce
    from gpulens.app.prometheus import ingest

    cfg = _config(setup)
    got = ingest(cfg, prometheus.url, START_S * NS, (START_S + MINUTES * 60) * NS,
                 (START_S + MINUTES * 60) * NS, step_s=30)  # fmt: skip
    assert got.rows > 0
    # the store keeps no partition labels: without the node's partition, the job in the
    # exempt partition debug is warned but never acted on (it may be exempt)
    unknown = enforce(cfg, now_ns=(START_S + 130 * 60) * NS, dry_run=False)
    by = {_who(o.action.spell.labels): o for o in unknown.outcomes}
    assert by["104"].action.level == "warn" and not by["104"].action.exempt
    later = enforce(cfg, now_ns=(START_S + 200 * 60) * NS, dry_run=True)
    by = {_who(o.action.spell.labels): o for o in later.outcomes}
    assert by["104"].action.level == "act" and by["104"].action.command is None
    assert "partition is unknown" in by["104"].action.reason
    setup.data_dir.joinpath("enforce-audit.jsonl").unlink()
    runs = []
    for minute in (130, 200):
        queues = {"node-a": "gpu", "node-b": "debug", "node-c": "gpu"}
        run = enforce(cfg, now_ns=(START_S + minute * 60) * NS, dry_run=False, node_queues=queues)
        runs.append({_who(o.action.spell.labels): o for o in run.outcomes})
    a, b = runs
    assert {k for k, o in a.items() if not o.action.exempt} == {
        "101",
        "102",
        "research/nb-1",
        INJECTED,
    }
    assert a["102"].action.spell.idle_s == pytest.approx(70 * 60, abs=90)
    assert b["101"].ran and ["101", "alice", "gpu"] in _calls(setup)
    assert "102" not in b  # worked at 140-150
    # a moment past the store's newest reading: nothing is known to be idle now
    late = enforce(cfg, now_ns=(START_S + MINUTES * 60 + 3600) * NS, dry_run=False)
    assert late.outcomes == [] and any("old" in n for n in late.notes)


def test_the_warning_command_runs_once_per_warning(prometheus: Prometheus, setup: Setup) -> None:
    warn = f"{shlex.quote(sys.executable)} {shlex.quote(str(setup.script))} warn {{job}} {{user}}"
    cfg = _config(setup, **{"enforce.warn_command": warn, "enforce.act_enabled": False})
    dry = _run(cfg, prometheus.url, 130, dry_run=True)
    assert dry["101"].action.command is not None and not dry["101"].ran
    assert _calls(setup) == []
    _run(cfg, prometheus.url, 130)
    _run(cfg, prometheus.url, 150)  # still idle, already warned: not again
    warned = sorted(call[1] for call in _calls(setup))
    assert warned == sorted(["101", "102", INJECTED])  # the pod has no {job}: no command
    assert all(call[0] == "warn" for call in _calls(setup))
    records = [r for r in _audit(setup) if r["key"] == "job:101"]
    assert len(records) == 1 and records[0]["ran"] and records[0]["exit_code"] == 0


def test_cli_with_squeue_json(prometheus: Prometheus, setup: Setup, shared: Path) -> None:
    real = shared / ("data/scheduler/rackslab_Slurm-web/tests/assets/slurmrestd/25.11/0.0.44/"
                     "slurm-job-gpus-running.json")  # fmt: skip
    doc = json.loads(real.read_text())
    running = {**doc["jobs"][0], "job_id": 101, "user_name": "alice", "qos": "normal"}
    ended = {**doc["jobs"][0], "job_id": 102, "user_name": "bob", "job_state": ["COMPLETED"]}
    squeue = setup.data_dir.parent / "squeue.json"
    squeue.write_text(json.dumps({**doc, "jobs": [running, ended]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_DATA_DIR"] = str(setup.data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "enforce", "--prometheus", prometheus.url,
         "--at", "2026-10-11T02:10:00Z", "--slurm", str(squeue), "--format", "json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    jobs = {a["subject"]["job"]: a for a in out["actions"]}
    assert (
        jobs["101"]["subject"]["qos"] == "normal" and jobs["101"]["subject"]["partition"] == "gpu"
    )
    assert "102" not in jobs and any("not running in squeue" in n for n in out["notes"])


def _pod_list(shared: Path, phase: str) -> dict[str, Any]:
    """The KAI example GPU pod (shared scheduler data), as our notebook pod in `phase`."""
    import yaml

    path = shared / "data/scheduler/NVIDIA_KAI-Scheduler/examples/quickstart/pods/gpu-pod.yaml"
    pod = yaml.safe_load(path.read_text())
    pod["metadata"].update(name="nb-1", namespace="research")
    pod["spec"]["nodeName"] = "node-c"
    pod["status"] = {"phase": phase, "startTime": "2026-10-11T00:00:00Z"}
    return {"apiVersion": "v1", "kind": "List", "items": [pod]}


def test_pods_kubernetes_does_not_show_running_are_left_alone(
    prometheus: Prometheus, setup: Setup, shared: Path
) -> None:
    from gpulens.app.enforce import pod_states
    from gpulens.collect.scheduler.kubernetes import parse_kubernetes

    cfg = _config(setup, **{"enforce.command": "kubectl delete pod {pod} -n {namespace}"})
    running = pod_states(parse_kubernetes([_pod_list(shared, "Running")], "pods").jobs)
    assert running == {"research/nb-1": "RUNNING"}
    a = _run(cfg, prometheus.url, 130, dry_run=True, pods=running)
    assert a["research/nb-1"].action.level == "warn"
    ended = pod_states(parse_kubernetes([_pod_list(shared, "Succeeded")], "pods").jobs)
    b = _run(cfg, prometheus.url, 130, dry_run=True, pods=ended)
    assert "research/nb-1" not in b and "101" in b  # Slurm jobs are not Kubernetes' to judge
    # the CLI reads the same from a dump
    dump = setup.data_dir.parent / "pods.json"
    dump.write_text(json.dumps(_pod_list(shared, "Succeeded")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_DATA_DIR"] = str(setup.data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "enforce", "--prometheus", prometheus.url,
         "--at", "2026-10-11T02:10:00Z", "--k8s", str(dump), "--format", "json"],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert not any(a["subject"]["pod"] == "nb-1" for a in out["actions"])
    assert any("not running in Kubernetes" in n for n in out["notes"])
