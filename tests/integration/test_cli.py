"""The `gpulens` command end to end, as a user runs it (a real subprocess, a real store)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

GPULENS = [sys.executable, "-m", "gpulens"]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    full_env.update(env or {})
    full_env["COLUMNS"] = "200"
    return subprocess.run(
        [*GPULENS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    data = tmp_path_factory.mktemp("demo")
    result = run("demo", "--duration", "600", "--speed", "0", "--no-serve", "--data-dir", str(data))
    return data, result


def test_demo_runs_the_fleet_and_summarises(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, result = demo_store
    assert result.returncode == 0, result.stderr
    assert "600 ticks" in result.stdout
    assert "duty cycle versus useful work" in result.stdout
    truth = json.loads((data / "ground_truth.json").read_text())
    assert {job["scenario"] for job in truth} >= {"healthy_training", "idle_allocated"}
    assert list((data / "gpu").glob("date=*/*.parquet"))


def test_demo_summary_separates_waste_from_headroom(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The demo's one-line summary says wasted and headroom apart, as the report counts them."""
    data, result = demo_store
    report = run("report", "--data-dir", str(data), "--format", "json")
    assert report.returncode == 0, report.stderr
    totals = json.loads(report.stdout)["totals"]
    line = next(x for x in result.stdout.splitlines() if x.startswith("Allocated"))
    wasted = float(line.split(" wasted ")[1].split()[0])
    headroom = float(line.split(" headroom ")[1].split()[0])
    assert totals["headroom_gpu_hours"] > 0  # the healthy training job's remainder
    assert wasted == pytest.approx(totals["wasted_gpu_hours"], rel=0.05, abs=0.01)
    assert headroom == pytest.approx(totals["headroom_gpu_hours"], rel=0.05, abs=0.01)


def test_query_formats(demo_store: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    data, _ = demo_store
    sql = "SELECT count(DISTINCT gpu_uuid) AS gpus, count(*) AS n FROM gpu"
    as_json = run("query", sql, "--data-dir", str(data), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    truth = json.loads((data / "ground_truth.json").read_text())
    gpus = len({uuid for job in truth for uuid in job["gpu_uuids"]})
    assert gpus == 12  # the demo's default fleet: 3 hosts × 4 GPUs
    rows = json.loads(as_json.stdout)
    assert rows[0]["gpus"] == gpus
    assert rows[0]["n"] == gpus * 600
    as_csv = run("query", sql, "--data-dir", str(data), "--format", "csv")
    assert as_csv.stdout.splitlines() == ["gpus,n", f"{gpus},{gpus * 600}"]
    as_table = run("query", sql, "--data-dir", str(data))
    assert "gpus" in as_table.stdout and str(gpus * 600) in as_table.stdout


def test_query_joins_useful_work_to_identity(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, _ = demo_store
    sql = (
        "SELECT p.engine, avg(g.gpu_util_ratio) duty, avg(g.sm_active_ratio) sm FROM gpu g "
        "JOIN process p ON g.gpu_uuid = p.gpu_uuid AND g.ts = p.ts GROUP BY 1 ORDER BY 1"
    )
    result = run("query", sql, "--data-dir", str(data), "--format", "json")
    assert result.returncode == 0, result.stderr
    engines = {row["engine"]: row for row in json.loads(result.stdout)}
    assert {"pytorch", "tensorrt"} <= set(engines)


def test_bad_sql_is_one_line_and_an_exit_code(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, _ = demo_store
    result = run("query", "SELEC nonsense", "--data-dir", str(data))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "SELEC" in result.stderr or "syntax" in result.stderr.lower()


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text("[collect]\ninterval_seconds = 0.001\n")
    result = run("record", "--config", str(cfg), "--duration", "1")
    assert result.returncode == 2
    assert "collect.interval_seconds" in result.stderr and "0.001" in result.stderr
    assert "Traceback" not in result.stderr
    debug = run("--debug", "record", "--config", str(cfg), "--duration", "1")
    assert "Traceback" in debug.stderr


def test_unknown_scenario_lists_the_valid_ones(tmp_path: Path) -> None:
    result = run(
        "demo",
        "--duration",
        "5",
        "--speed",
        "0",
        "--scenario",
        "bogus",
        "--data-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert "bogus" in result.stderr and "idle_allocated" in result.stderr


def test_record_runs_in_real_time_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "store"}"\n[collect]\ninterval_seconds = 0.2\n'
        'collectors = ["simulated"]\n[store]\nflush_seconds = 60\n'
        "[simulated]\nhosts = 1\ngpus_per_host = 2\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    proc = subprocess.Popen(
        [*GPULENS, "record", "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    # The buffer (flush interval 60 s) was flushed on the way out: nothing recorded is lost.
    result = run(
        "query",
        "SELECT count(*) n FROM gpu",
        "--data-dir",
        str(tmp_path / "store"),
        "--format",
        "json",
    )
    assert json.loads(result.stdout)[0]["n"] >= 2 * 5


def test_query_prints_every_table_of_a_recording_with_its_nanoseconds(tmp_path: Path) -> None:
    """`record` stamps events with the clock's nanoseconds: `query` prints every table of
    its store in every format, each timestamp with all nine fractional digits."""
    store = tmp_path / "store"
    env = {"GPULENS_COLLECT_COLLECTORS": "simulated", "GPULENS_SIMULATED_HOSTS": "1"}
    recorded = run("record", "--data-dir", str(store), "--duration", "2", env=env)
    assert recorded.returncode == 0, recorded.stderr
    tables = sorted(p.name for p in store.iterdir() if p.is_dir())
    assert {"gpu", "process", "host", "event"} <= set(tables), tables
    for table in tables:
        for fmt in ("table", "csv", "json"):
            result = run(
                "query", f"SELECT * FROM {table}", "--data-dir", str(store), "--format", fmt
            )
            assert result.returncode == 0, (table, fmt, result.stderr)
            assert "Traceback" not in result.stderr and result.stdout.strip(), (table, fmt)
    sql = "SELECT ts, epoch_ns(ts) AS ns FROM event ORDER BY ts"
    rows = json.loads(run("query", sql, "--data-dir", str(store), "--format", "json").stdout)
    assert any(row["ns"] % 1000 for row in rows)  # finer than microseconds: the case at stake
    for row in rows:
        seconds, _, fraction = row["ts"].partition(".")
        assert len(fraction) == 9 and int(fraction) == row["ns"] % 1_000_000_000, row
        whole = datetime.fromisoformat(seconds).replace(tzinfo=UTC).timestamp()
        assert int(whole) == row["ns"] // 1_000_000_000, row
    as_csv = run("query", sql, "--data-dir", str(store), "--format", "csv").stdout.splitlines()
    assert as_csv[1:] == [f"{row['ts']},{row['ns']}" for row in rows]


def test_doctor_explains_each_source() -> None:
    result = run("doctor")
    assert result.returncode == 0, result.stderr
    assert "simulated" in result.stdout and "nvml" in result.stdout


def test_ingest_a_dcgm_page_and_nvidia_smi_xml(tmp_path: Path, shared: Path) -> None:
    t4 = (
        shared
        / "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
    )
    a100 = (
        shared
        / "data/telemetry/influxdata_telegraf/plugins/inputs/nvidia_smi/testdata"
        / "a100-sxm4-v12.xml"
    )
    store = tmp_path / "store"
    result = run(
        "ingest",
        str(t4),
        str(a100),
        "--data-dir",
        str(store),
        "--host",
        "lab",
        "--time",
        "2026-11-29T12:00:00Z",
    )
    assert result.returncode == 0, result.stderr
    sql = (
        "SELECT gpu_model, gpu_util_ratio, graphics_active_ratio, tensor_active_ratio, "
        "power_watts, sm_clock_hertz, mig_instance, epoch_ns(ts) AS ts FROM gpu "
        "ORDER BY gpu_model, mig_instance NULLS FIRST"
    )
    rows = json.loads(run("query", sql, "--data-dir", str(store), "--format", "json").stdout)
    t4_row = next(r for r in rows if r["gpu_model"] == "Tesla T4")
    # The canonical "looks busy, is wasted" GPU: 91 % duty cycle, 16 % engine, 0.6 % tensor.
    assert t4_row["gpu_util_ratio"] == pytest.approx(0.91, abs=1e-3)
    assert t4_row["graphics_active_ratio"] == pytest.approx(0.156205, abs=1e-4)
    assert t4_row["tensor_active_ratio"] == pytest.approx(0.005822, abs=1e-4)
    assert t4_row["power_watts"] == pytest.approx(68.244, abs=0.01)
    assert t4_row["sm_clock_hertz"] == pytest.approx(6.6e8, rel=1e-6)
    assert t4_row["ts"] == 1_795_953_600_000_000_000
    migs = [r["mig_instance"] for r in rows if r["mig_instance"] is not None]
    assert sorted(migs) == ["3", "4", "5", "6"]


def test_ingest_rejects_a_corrupt_file_and_stores_nothing(tmp_path: Path, shared: Path) -> None:
    good = (
        shared
        / "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
    )
    bad = tmp_path / "truncated.xml"
    bad.write_text('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu id="0">\n<product_name>T4')
    store = tmp_path / "store"
    result = run("ingest", str(good), str(bad), "--data-dir", str(store))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "truncated.xml" in result.stderr and "line" in result.stderr
    assert not list(store.rglob("*.parquet"))


def test_record_the_host_of_this_machine(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {"GPULENS_COLLECT_COLLECTORS": "host", "GPULENS_COLLECT_INTERVAL_SECONDS": "0.5"}
    result = run("record", "--data-dir", str(store), "--duration", "2", env=env)
    assert result.returncode == 0, result.stderr
    sql = "SELECT count(*) n, max(host_cpu_count) cpus, max(host_memory_total_bytes) mem FROM host"
    row = json.loads(run("query", sql, "--data-dir", str(store), "--format", "json").stdout)[0]
    assert row["n"] >= 4 and row["cpus"] >= 1 and row["mem"] > 1e8


def test_record_without_a_gpu_driver_says_what_to_install(tmp_path: Path) -> None:
    env = {"GPULENS_COLLECT_COLLECTORS": "nvml"}
    result = run("record", "--data-dir", str(tmp_path), "--duration", "1", env=env)
    if result.returncode == 0:
        pytest.skip("this machine has a working NVIDIA driver")
    assert result.returncode == 3
    assert "nvidia-ml-py" in result.stderr or "driver" in result.stderr
    assert "Traceback" not in result.stderr


def test_report_in_every_format(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    data, _ = demo_store
    as_json = run("report", "--data-dir", str(data), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["schema_version"] == 2 and doc["kind"] == "fleet"
    totals = doc["totals"]
    assert totals["gpus"] == 12
    # Duty cycle is not useful work: the fleet's useful GPU-hours are below its allocated ones.
    assert totals["useful_gpu_hours"] < totals["allocated_gpu_hours"] <= totals["gpu_hours"]
    assert totals["mean_sm_active"] < totals["mean_duty"]
    for f in doc["findings"]:
        assert {
            "rule_id",
            "severity",
            "subject",
            "window",
            "evidence",
            "impact",
            "recommendation",
            "docs",
        } <= set(f)
    page = tmp_path / "fleet.html"
    html_run = run("report", "--data-dir", str(data), "--format", "html", "-o", str(page))
    assert html_run.returncode == 0, html_run.stderr
    text = page.read_text()
    assert text.startswith("<!doctype html>") and "<svg" in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text
    md = run("report", "--data-dir", str(data), "--format", "markdown")
    assert md.stdout.startswith("# Fleet report")
    term = run("report", "--data-dir", str(data))
    assert "duty cycle (nvidia-smi)" in term.stdout


@pytest.mark.parametrize("by", ["user", "team"])
def test_report_flags_groups_over_their_quota(
    demo_store: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, by: str
) -> None:
    data, _ = demo_store
    truth = json.loads((data / "ground_truth.json").read_text())
    jobs = [j for j in truth if j["pids"]]
    groups = sorted({j[by] for j in jobs})
    cfg = tmp_path / "quotas.toml"
    quotas = ", ".join(f'"{g}=1"' for g in groups)  # equal quotas for every group
    cfg.write_text(f'[fairness]\nquota_by = "{by}"\nquotas = [{quotas}]\n')
    result = run("report", "--data-dir", str(data), "--config", str(cfg), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    # independently: each group's GPUs × the time since its jobs started, as a share of all
    end = doc["totals"]["end_ns"]
    held = dict.fromkeys(groups, 0.0)
    for j in jobs:
        held[j[by]] += len(j["gpu_uuids"]) * (end - j["start_ns"])
    total = sum(held.values())
    expected = {g for g, h in held.items() if h / total >= 0.1 and (h / total) * len(groups) >= 1.5}
    assert expected  # the 2-GPU jobs' users, the team running three jobs
    flagged = {f["subject"][by] for f in doc["findings"] if f["rule_id"] == "unfair_share"}
    assert flagged == expected


def test_job_report_and_bad_time(demo_store: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    data, _ = demo_store
    truth = json.loads((data / "ground_truth.json").read_text())
    job = next(j for j in truth if j["scenario"] == "idle_allocated")
    result = run("report", "--data-dir", str(data), "--job", job["job_id"], "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["kind"] == "job" and doc["totals"]["gpus"] == len(job["gpu_uuids"])
    bad = run("report", "--data-dir", str(data), "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_trace_command_on_a_real_trace(tmp_path: Path, shared: Path) -> None:
    traces = sorted((shared / "data/traces").rglob("*.json.gz"))
    assert traces
    out = tmp_path / "trace.json"
    result = run("trace", str(traces[0]), "--format", "json", "-o", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["ranks"] and {"temporal", "idle_by_stream", "device_idle_us"} <= set(doc["ranks"][0])
    bad = run("trace", str(tmp_path / "missing.json"))
    assert bad.returncode != 0 and "missing.json" in bad.stderr and "Traceback" not in bad.stderr
