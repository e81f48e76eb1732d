"""Ground truth: what a correct analysis of the simulated fleet must conclude.

Plain dicts and lists (JSON-serialisable). Levels are the steady-state means of the phase model
(what a long window converges to), not samples of the binding's output.
"""

from __future__ import annotations

from typing import Any

from gpulens.collect.simulated.gpu import SimGpu
from gpulens.collect.simulated.layout import FleetLayout
from gpulens.collect.simulated.phases import DRAM, DUTY, FP32, POWER, SM, TENSOR, WAIT
from gpulens.collect.simulated.physics import GpuModel, Stage
from gpulens.collect.simulated.scenarios import LEAK_RESTART_S

_LEVELS = {
    "duty": DUTY,
    "sm_active": SM,
    "tensor_active": TENSOR,
    "fp32_active": FP32,
    "dram_active": DRAM,
    "power_watts": POWER,
}


def _steady(model: GpuModel) -> Stage:
    """The last stage named steady (after any thermal split)."""
    return [s for s in model.stages if s.spec.name == "steady"][-1]


def _levels(models: list[GpuModel]) -> dict[str, float]:
    means = [_steady(m).schedule.mean for m in models]
    return {k: round(sum(float(m[c]) for m in means) / len(means), 4) for k, c in _LEVELS.items()}


def _ns(fleet: FleetLayout, seconds: float) -> int:
    return fleet.start_ns + round(seconds * 1e9)


def ground_truth(fleet: FleetLayout) -> list[dict[str, Any]]:
    """One entry per job, then one per GPU no job holds (state idle_unallocated)."""
    out: list[dict[str, Any]] = []
    held: set[str] = set()
    for job in fleet.jobs:
        gpus: list[SimGpu] = [fleet.gpus(job.host)[i] for i in job.gpu_indices]
        models = [g.model for g in gpus]
        held.update(g.uuid for g in gpus)
        spec = job.spec
        warm_end = job.start_s + models[0].stages[0].end
        steady = _steady(models[0])
        steady_end = None if models[0].epoch_s is None else _ns(fleet, job.start_s + steady.end)
        findings: list[dict[str, Any]] = []
        for rule in spec.findings:
            finding: dict[str, Any] = {"rule_id": rule}
            if rule == "straggler" and spec.slow_rank is not None:
                finding["gpu_uuid"] = gpus[spec.slow_rank].uuid
            if rule == "memory_leak":
                finding["rate_bytes_per_second"] = steady.spec.leak_bytes_per_second
                finding["oom_at_ns"] = steady_end
                finding["restart_every_s"] = models[0].epoch_s
                finding["restart_delay_s"] = LEAK_RESTART_S
            if rule == "throttled":
                finding["reasons"] = ["sw_power_cap", "sw_thermal_slowdown"]
                onset = [s.start for s in models[0].stages if s.thermal]
                finding["thermal_onset_ns"] = _ns(fleet, job.start_s + onset[0]) if onset else None
            if rule == "input_bound":
                finding["data_wait_ratio"] = round(float(steady.schedule.mean[WAIT]), 4)
            findings.append(finding)
        out.append(
            {
                "job_id": job.job_id,
                "scenario": spec.scenario,
                "host": job.host,
                "gpu_uuids": list(job.uuids),
                "gpu_indices": list(job.gpu_indices),
                "pids": [job.pid(rank, 0) for rank in range(len(gpus))],
                **{
                    k: job.labels[k]
                    for k in (
                        "user",
                        "project",
                        "team",
                        "engine",
                        "process_name",
                        "container",
                        "pod",
                        "namespace",
                    )
                },
                "start_ns": _ns(fleet, job.start_s),
                "warmup": [_ns(fleet, job.start_s), _ns(fleet, warm_end)],
                "steady": [_ns(fleet, warm_end), steady_end],
                "expected_state": spec.state,
                "expected_findings": findings,
                "expected_levels": _levels(models),
                "gpus": [
                    {
                        "uuid": g.uuid,
                        "index": g.info.index,
                        "rank": r,
                        "expected_state": spec.rank_states.get(r, spec.state),
                        "expected_levels": _levels([g.model]),
                    }
                    for r, g in enumerate(gpus)
                ],
            }
        )
    for host in fleet.hosts:
        for g in fleet.gpus(host):
            if g.uuid in held:
                continue
            out.append(
                {
                    "job_id": None,
                    "scenario": "idle_unallocated",
                    "host": host,
                    "gpu_uuids": [g.uuid],
                    "gpu_indices": [g.info.index],
                    "pids": [],
                    "expected_state": "idle_unallocated",
                    "expected_findings": [],
                    "expected_levels": {
                        "duty": 0.0,
                        "sm_active": 0.0,
                        "tensor_active": 0.0,
                        "fp32_active": 0.0,
                        "dram_active": 0.0,
                        "power_watts": g.model.device.idle_power_w,
                    },
                }
            )
    return out
