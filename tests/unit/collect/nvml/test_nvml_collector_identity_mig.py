"""Process identity every tick, batch-job labels from the hpc job mapping, and MIG instances."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from nvml_fake import FakeBinding, info

from gpulens.collect.nvml.binding import NvmlNotSupported, ProcessInfo, ProcessUtilSample
from gpulens.collect.nvml.collector import NvmlCollector
from gpulens.model import Kind, Reading

T0 = 1_764_000_000 * 10**9
S = 10**9


def _gpu(readings: list[Reading], uuid: str = "GPU-0000") -> Reading:
    (reading,) = [r for r in readings if r.kind is Kind.GPU and r.label("gpu_uuid") == uuid]
    return reading


def _procs(readings: list[Reading]) -> dict[str, Reading]:
    return {r.label("pid"): r for r in readings if r.kind is Kind.PROCESS}


class Identity:
    """A resolver whose answers the test changes; returns the same object while unchanged."""

    def __init__(self) -> None:
        self.labels: dict[int, Mapping[str, str]] = {}
        self.calls = 0

    def identify(self, pid: int) -> Mapping[str, str]:
        self.calls += 1
        return self.labels.get(pid, MappingProxyType({}))


class JobIdentity(Identity):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, list[str]] = {}
        self.asked: list[str] = []

    def jobs_for_gpu(self, gpu_index: str) -> list[str]:
        self.asked.append(gpu_index)
        return self.jobs.get(gpu_index, [])


def test_identity_is_asked_every_tick_and_a_reused_pid_gets_new_labels() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    identity = Identity()
    identity.labels[41] = MappingProxyType({"user": "alice", "job_id": "1"})
    collector = NvmlCollector(binding, "h", identity)
    first = _procs(collector.collect(T0))["41"]
    second = _procs(collector.collect(T0 + S))["41"]
    assert first.labels["user"] == "alice"
    assert second.labels is first.labels  # same answer: labels reused, not rebuilt
    identity.labels[41] = MappingProxyType({"user": "bob", "job_id": "2"})  # pid reused
    third = _procs(collector.collect(T0 + 2 * S))["41"]
    assert (third.labels["user"], third.labels["job_id"]) == ("bob", "2")
    assert identity.calls == 3


def test_equal_fresh_mappings_reuse_labels() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]

    class Fresh:
        def identify(self, pid: int) -> dict[str, str]:
            return {"user": "alice"}  # a new dict each call, like the simulated fleet

    collector = NvmlCollector(binding, "h", Fresh())
    a = _procs(collector.collect(T0))["41"]
    b = _procs(collector.collect(T0 + S))["41"]
    assert a.labels is b.labels


def test_identity_error_never_breaks_a_tick() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]

    class Broken:
        def identify(self, pid: int) -> dict[str, str]:
            raise RuntimeError("boom")

    collector = NvmlCollector(binding, "h", Broken())
    proc = _procs(collector.collect(T0))["41"]
    assert proc.labels["pid"] == "41" and "user" not in proc.labels
    assert collector.errors == {"identity": 1}


def test_jobs_for_gpu_labels_gpu_and_processes_without_a_job() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30), ProcessInfo(42, 2**30)]
    identity = JobIdentity()
    identity.labels[42] = MappingProxyType({"job_id": "own-7"})
    identity.jobs = {"0": ["101", "102"]}
    collector = NvmlCollector(binding, "h", identity)
    out = collector.collect(T0)
    assert _gpu(out).labels["job_id"] == "101,102"
    assert "job_id" not in _gpu(out, "GPU-0001").labels
    procs = _procs(out)
    assert procs["41"].labels["job_id"] == "101,102"  # from the GPU's mapping
    assert procs["42"].labels["job_id"] == "own-7"  # its own job wins
    assert sorted(set(identity.asked)) == ["0", "1"]


def test_job_mapping_changes_show_on_the_next_tick() -> None:
    binding = FakeBinding()
    binding.processes["GPU-0000"] = [ProcessInfo(41, 2**30)]
    identity = JobIdentity()
    identity.jobs = {"0": ["101"]}
    collector = NvmlCollector(binding, "h", identity)
    first = collector.collect(T0)
    again = collector.collect(T0 + S)
    assert _gpu(again).labels is _gpu(first).labels  # unchanged job: same labels object
    identity.jobs = {"0": ["202"]}
    later = collector.collect(T0 + 2 * S)
    assert _gpu(later).labels["job_id"] == "202"
    assert _procs(later)["41"].labels["job_id"] == "202"
    identity.jobs = {}
    done = collector.collect(T0 + 3 * S)
    assert "job_id" not in _gpu(done).labels and "job_id" not in _procs(done)["41"].labels


def _mig_binding() -> FakeBinding:
    parent = info(0, mig_mode=True)
    migs = [
        info(0, uuid=f"MIG-{gi}", name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", parent_uuid="GPU-0000",
             gpu_instance_id=gi, compute_instance_id=0, mig_profile="3g.40gb",
             power_limit_mw=None)
        for gi in (1, 2)
    ]  # fmt: skip
    binding = FakeBinding(devices=[parent], migs={0: migs})
    binding.processes["MIG-1"] = [ProcessInfo(7, 2**30, gpu_instance_id=1, compute_instance_id=0)]
    binding.samples["MIG-1"] = [ProcessUtilSample(7, 10, 50, 10)]
    return binding


def test_mig_gpm_per_instance_through_the_parent() -> None:
    binding = _mig_binding()
    collector = NvmlCollector(binding, "h")
    first = collector.collect(T0)
    assert "sm_active_ratio" not in _gpu(first, "MIG-1").values  # first-sample rule
    second = collector.collect(T0 + S)
    mig = _gpu(second, "MIG-1").values
    assert mig["sm_active_ratio"] == 0.4
    assert mig["graphics_active_ratio"] == 0.6
    assert mig["tensor_active_ratio"] == 0.2
    assert "pcie_rx_bytes_per_second" not in mig  # not per GPU instance
    assert ("GPU-0000", 1) in binding.mig_samples and ("GPU-0000", 2) in binding.mig_samples
    assert _gpu(second, "GPU-0000").values["sm_active_ratio"] == 0.55  # the whole GPU


def test_mig_metrics_nvml_does_not_give_are_absent() -> None:
    binding = _mig_binding()
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    out = collector.collect(T0 + S)
    mig = _gpu(out, "MIG-1")
    assert mig.labels["parent_uuid"] == "GPU-0000" and mig.labels["mig_instance"] == "1"
    assert mig.labels["mig_profile"] == "3g.40gb" and mig.labels["gpu_index"] == "0"
    for absent in ("gpu_util_ratio", "power_watts", "power_limit_watts", "energy_joules",
                   "temperature_celsius", "enc_util_ratio", "nvlink_tx_bytes_total",
                   "ecc_sbe_volatile_total", "slowdown_temperature_celsius"):  # fmt: skip
        assert absent not in mig.values, absent
    assert mig.values["memory_used_bytes"] == 69 * 2**30
    caps = collector.capabilities()["MIG-1"]
    assert caps["utilization"] is False and caps["power"] is False and caps["gpm"] is True
    assert caps["energy_power_integral"] is False  # no power either: nothing to integrate
    (proc,) = [r for r in out if r.kind is Kind.PROCESS]
    assert proc.labels["gpu_uuid"] == "MIG-1" and proc.labels["mig_instance"] == "1"
    assert proc.values["process_memory_used_bytes"] == 2**30
    assert "process_sm_util_ratio" not in proc.values  # per-process util: not on MIG
    assert collector.errors == {}


def test_mig_instances_use_their_own_job_file() -> None:
    binding = _mig_binding()
    identity = JobIdentity()
    identity.jobs = {"0": ["9", "10"], "0.1": ["9"], "0.2": ["10"]}
    out = NvmlCollector(binding, "h", identity).collect(T0)
    assert _gpu(out, "MIG-1").labels["job_id"] == "9"
    assert _gpu(out, "MIG-2").labels["job_id"] == "10"
    assert _procs(out)["7"].labels["job_id"] == "9"
    assert {"0.1", "0.2"} <= set(identity.asked)


def test_gpm_on_a_mig_instance_not_supported_is_absent() -> None:
    binding = _mig_binding()
    binding.fail[("MIG-2", "gpm_sample")] = NvmlNotSupported("no compute instance")
    collector = NvmlCollector(binding, "h")
    collector.collect(T0)
    out = collector.collect(T0 + S)
    assert "sm_active_ratio" not in _gpu(out, "MIG-2").values
    assert _gpu(out, "MIG-1").values["sm_active_ratio"] == 0.4
    assert collector.capabilities()["MIG-2"]["gpm"] is False
