"""PynvmlBinding's new calls over a stand-in for the pynvml module (no GPU needed).

The stand-in uses the installed nvidia-ml-py's own ctypes structs and exception classes, so
field-value decoding and error translation are checked against the real package layout.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pynvml = pytest.importorskip("pynvml")

from gpulens.collect.nvml.binding import (  # noqa: E402
    ECC_CORRECTED,
    TEMPERATURE_THRESHOLD_SLOWDOWN,
    NvlinkCounters,
    NvmlError,
    NvmlNotSupported,
    RemappedRows,
)
from gpulens.collect.nvml.pynvml_binding import PynvmlBinding  # noqa: E402

GPU, MIG, PARENT = object(), object(), object()


def _field_values(answers: dict[tuple[int, int], tuple[int, int, float]]) -> Any:
    def get(handle: object, ids: list[tuple[int, int]]) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        for i, (field_id, scope) in enumerate(ids):
            ret, vtype, value = answers.get((field_id, scope), (3, 0, 0))  # NOT_SUPPORTED
            values[i].fieldId, values[i].scopeId = field_id, scope
            values[i].nvmlReturn, values[i].valueType = ret, vtype
            member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")[vtype]
            setattr(values[i].value, member, value)
        return values

    return get


def _fail(code: int) -> Any:
    def call(*args: object) -> Any:
        raise pynvml.NVMLError(code)

    return call


def _binding(**overrides: Any) -> PynvmlBinding:
    calls: list[tuple[str, tuple[object, ...]]] = []

    def rec(name: str, result: Any = None) -> Any:
        def call(*args: object) -> Any:
            calls.append((name, args))
            return result

        return call

    nv = SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVML_VOLATILE_ECC=pynvml.NVML_VOLATILE_ECC,
        nvmlDeviceGetEncoderUtilization=lambda h: [67, 167_000],
        nvmlDeviceGetDecoderUtilization=lambda h: [5, 167_000],
        nvmlDeviceGetTemperatureThreshold=rec("threshold", 87),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 450_000,
        nvmlDeviceGetTotalEccErrors=rec("ecc", 3),
        nvmlDeviceGetPcieReplayCounter=lambda h: 12,
        nvmlDeviceGetRemappedRows=lambda h: (2, 1, 0, 1),
        nvmlDeviceGetFieldValues=_field_values(
            {
                (82, 0): (0, 1, 71),  # memory temperature, unsigned int
                (91, 0): (0, 1, 2),  # two NVLink links
                (138, 0): (0, 3, 100),
                (139, 0): (0, 3, 200),
                (138, 1): (0, 3, 1000),
                (139, 1): (0, 3, 2000),
            }
        ),
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [
            SimpleNamespace(
                pid=9, usedGpuMemory=None, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
            )
        ],
        nvmlGpmSampleAlloc=lambda: object(),
        nvmlGpmSampleFree=rec("free"),
        nvmlGpmSampleGet=rec("sample"),
        nvmlGpmMigSampleGet=rec("mig_sample"),
        nvmlGpmQueryDeviceSupport=lambda h: SimpleNamespace(isSupportedDevice=h is PARENT),
        nvmlDeviceIsMigDeviceHandle=lambda h: h is MIG,
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle=lambda h: PARENT,
        nvmlDeviceGetGpuInstanceId=lambda h: 5,
    )
    for key, value in overrides.items():
        setattr(nv, key, value)
    b = PynvmlBinding.__new__(PynvmlBinding)
    PynvmlBinding.__init__(b)
    b._nv = nv
    b._handles.update({"GPU-0": GPU, "MIG-0": MIG, "GPU-P": PARENT})
    b.calls = calls  # type: ignore[attr-defined]
    return b


def test_simple_calls_and_units() -> None:
    b = _binding()
    assert b.encoder_utilization_percent("GPU-0") == 67
    assert b.decoder_utilization_percent("GPU-0") == 5
    assert b.temperature_threshold_c("GPU-0", TEMPERATURE_THRESHOLD_SLOWDOWN) == 87
    assert b.enforced_power_limit_mw("GPU-0") == 450_000
    assert b.total_ecc_errors("GPU-0", ECC_CORRECTED) == 3
    assert ("ecc", (GPU, ECC_CORRECTED, pynvml.NVML_VOLATILE_ECC)) in b.calls  # type: ignore[attr-defined]
    assert b.pcie_replay_counter("GPU-0") == 12
    assert b.remapped_rows("GPU-0") == RemappedRows(2, 1, pending=False, failure=True)
    (proc,) = b.graphics_processes("GPU-0")
    assert (proc.pid, proc.used_gpu_memory, proc.gpu_instance_id) == (9, None, None)


def test_field_values_memory_temperature_and_nvlink_sum_over_links() -> None:
    b = _binding()
    assert b.memory_temperature_c("GPU-0") == 71
    assert b.nvlink_throughput_kib("GPU-0") == NvlinkCounters(1100, 2200)


def test_nvlink_aggregate_scope_when_the_link_count_is_unknown() -> None:
    b = _binding(
        nvmlDeviceGetFieldValues=_field_values(
            {(138, 0xFFFFFFFF): (0, 3, 5), (139, 0xFFFFFFFF): (0, 3, 6)}
        )
    )
    assert b.nvlink_throughput_kib("GPU-0") == NvlinkCounters(5, 6)


def test_field_not_supported_raises_not_supported() -> None:
    b = _binding(nvmlDeviceGetFieldValues=_field_values({}))
    with pytest.raises(NvmlNotSupported):
        b.memory_temperature_c("GPU-0")
    with pytest.raises(NvmlNotSupported):
        b.nvlink_throughput_kib("GPU-0")


def test_errors_are_translated() -> None:
    b = _binding(
        nvmlDeviceGetEncoderUtilization=_fail(pynvml.NVML_ERROR_NOT_SUPPORTED),
        nvmlDeviceGetPcieReplayCounter=_fail(pynvml.NVML_ERROR_UNKNOWN),
    )
    with pytest.raises(NvmlNotSupported):
        b.encoder_utilization_percent("GPU-0")
    with pytest.raises(NvmlError):
        b.pcie_replay_counter("GPU-0")


def test_gpm_on_a_mig_instance_samples_the_parent_with_the_instance_id() -> None:
    b = _binding()
    assert b.gpm_supported("MIG-0") is True  # asked of the parent
    sample = b.gpm_sample("MIG-0")
    calls = b.calls  # type: ignore[attr-defined]
    (mig_call,) = [args for name, args in calls if name == "mig_sample"]
    assert mig_call[0] is PARENT and mig_call[1] == 5 and mig_call[2] is sample.handle  # type: ignore[attr-defined]
    b.gpm_sample("GPU-0")
    assert [args[0] for name, args in calls if name == "sample"] == [GPU]
