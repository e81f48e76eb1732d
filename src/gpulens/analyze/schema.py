"""The interval frame: the one table analysis works on.

One row per GPU entity (a whole GPU or a MIG instance) per interval of `step_s` seconds,
built from the store by `gpulens.store.frames.gpu_intervals` (or by hand in tests and
importers) as a `pyarrow.Table`. Analysis functions take such tables and return tables or
records; they never read files. A column whose source metric is missing holds nulls, never 0.

Column groups (names are the contract; types in parentheses):
- time: `start_ns` (int64, interval start, UTC ns), `step_s` (float64, interval length),
  `samples` (int64, readings that fell in the interval), `covered_s` (float64, the seconds
  those readings stand for: each covers the time until the next reading of its GPU, capped at
  the maximum gap, so a lone snapshot covers 0 s and sparse readings may cover more than
  `step_s`), `no_data_s` (float64, seconds of gaps beyond the cap that start in the interval:
  no data, neither allocated nor unallocated). A frame without `covered_s` counts `step_s`;
- identity (string): `host`, `gpu_uuid`, `gpu_index`, `gpu_model`, `mig_instance`,
  `parent_uuid`, `mig_profile` (`3g.40gb`: its share of the GPU, see `waste`);
- attribution (string, from the process holding most GPU memory in the interval; null when no
  process): `pid`, then `gpulens.model.ATTRIBUTION_LABELS` (`process_name`, `user`, `project`,
  `team`, `job_id`, `container`, `pod`, `namespace`, `engine`); and `processes` (int64,
  distinct processes seen);
- means over the interval (float64, base units): `duty` (gpu_util_ratio), `mem_copy`,
  `graphics_active`, `sm_active`, `sm_occupancy`, `tensor_active`, `dram_active`,
  `fp32_active`, `fp16_active`, `fp64_active`, `pcie_rx_bps`, `pcie_tx_bps`, `nvlink_bps`
  (rx + tx), `sm_clock_hz`, `power_w`, `temperature_c`;
- spread within the interval (float64): `sm_active_min`, `sm_active_max`, `duty_min`;
- level facts (float64): `sm_clock_max_hz`, `power_limit_w`, `memory_total_bytes`,
  `memory_used_bytes` (max), `memory_used_first` and `memory_used_last` (first and last
  sample, for growth), `process_memory_bytes` (the processes' memory: the sum of each
  process's peak in the interval, which is the peak of the sum unless processes peak at
  different moments);
- energy (float64): `energy_j` (counter increase over the interval; null without a counter),
  `energy_power_j` (power mean × step_s, the fallback estimate);
- throttling (float64, fraction of samples with the flag set): `throttle_power`,
  `throttle_thermal`, `clock_idle`;
- host and application context (float64, null when not reported): `host_cpu` (host CPU busy
  ratio), `host_iowait`, `data_wait` (the job's app_data_wait_ratio), `tokens_per_s`,
  `model_parameters`, `kernel_launches_per_s`, `latency_p50_s`;
- health (float64, null when not reported): `ecc_dbe_total` (uncorrected ECC errors since the
  driver loaded, the interval's largest count), `xid_last` (the largest XID error number
  reported in the interval).
"""

from __future__ import annotations

from gpulens.model import ATTRIBUTION_LABELS

TIME_COLUMNS: tuple[str, ...] = ("start_ns", "step_s", "samples", "covered_s", "no_data_s")
IDENTITY_COLUMNS: tuple[str, ...] = (
    "host",
    "gpu_uuid",
    "gpu_index",
    "gpu_model",
    "mig_instance",
    "parent_uuid",
    "mig_profile",
)
# the attributed process: its pid, then gpulens.model.ATTRIBUTION_LABELS (pod_uid is not one)
ATTRIBUTION_COLUMNS: tuple[str, ...] = ("pid", *ATTRIBUTION_LABELS)
MEAN_COLUMNS: dict[str, str] = {
    # frame column → catalog metric averaged over the interval
    "duty": "gpu_util_ratio",
    "mem_copy": "mem_copy_util_ratio",
    "graphics_active": "graphics_active_ratio",
    "sm_active": "sm_active_ratio",
    "sm_occupancy": "sm_occupancy_ratio",
    "tensor_active": "tensor_active_ratio",
    "dram_active": "dram_active_ratio",
    "fp32_active": "fp32_active_ratio",
    "fp16_active": "fp16_active_ratio",
    "fp64_active": "fp64_active_ratio",
    "pcie_rx_bps": "pcie_rx_bytes_per_second",
    "pcie_tx_bps": "pcie_tx_bytes_per_second",
    "sm_clock_hz": "sm_clock_hertz",
    "power_w": "power_watts",
    "temperature_c": "temperature_celsius",
}
SPREAD_COLUMNS: tuple[str, ...] = ("sm_active_min", "sm_active_max", "duty_min")
LEVEL_COLUMNS: tuple[str, ...] = (
    "sm_clock_max_hz",
    "power_limit_w",
    "memory_total_bytes",
    "memory_used_bytes",
    "memory_used_first",
    "memory_used_last",
    "process_memory_bytes",
    "nvlink_bps",
)
ENERGY_COLUMNS: tuple[str, ...] = ("energy_j", "energy_power_j")
THROTTLE_COLUMNS: tuple[str, ...] = ("throttle_power", "throttle_thermal", "clock_idle")
CONTEXT_COLUMNS: tuple[str, ...] = (
    "host_cpu",
    "host_iowait",
    "data_wait",
    "tokens_per_s",
    "model_parameters",
    "kernel_launches_per_s",
    "latency_p50_s",
)
HEALTH_COLUMNS: tuple[str, ...] = ("ecc_dbe_total", "xid_last")

ALL_COLUMNS: tuple[str, ...] = (
    TIME_COLUMNS
    + IDENTITY_COLUMNS
    + ATTRIBUTION_COLUMNS
    + ("processes",)
    + tuple(MEAN_COLUMNS)
    + SPREAD_COLUMNS
    + LEVEL_COLUMNS
    + ENERGY_COLUMNS
    + THROTTLE_COLUMNS
    + CONTEXT_COLUMNS
    + HEALTH_COLUMNS
)

# The states an interval can be in (analyze/efficiency.py assigns exactly one; the rules are
# in docs/analysis/states.md). `busy`: kernels ran, but the metrics at hand (duty cycle only,
# or no pipe standing out) say no more; `unknown`: no activity metric at all.
STATES: tuple[str, ...] = (
    "idle_unallocated",
    "idle_allocated",
    "hollow_busy",
    "memory_bound",
    "compute_tensor",
    "compute_fp32",
    "input_bound",
    "comm_bound",
    "throttled",
    "warmup",
    "busy",
    "unknown",
)
