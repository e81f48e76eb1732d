"""HTA's kernel-type breakdown, comm/comp overlap and kernel-launch statistics of one rank (pure).

Definitions (HTA's, see docs/traces.md and ../shared/notes/hta-and-kineto.md §2.6, §3.3-3.5):

* kernel types by name, first match wins: COMMUNICATION (`^nccl`, `^hip`, `^hccl`, `ncclKernel`),
  MEMORY (`^(hip)?Memcpy`, `^(hip)?Memset`, `^dma`), COMPUTATION (none of HTA's non-compute
  patterns, breakdown.NON_COMPUTE), else OTHER (not counted);
* kernel-type time: the union of each type's rows, swept together: every instant at least one
  type runs is counted once, under the set of types running then (`COMPUTATION overlapping
  COMMUNICATION`, ...);
* comm/comp overlap = |∪ COMMUNICATION ∩ ∪ COMPUTATION| / |∪ COMMUNICATION| (None without
  communication rows; HTA prints NaN);
* launch statistics: each launch call (`cudaLaunchKernel`, `cudaLaunchKernelExC`,
  `cudaMemcpyAsync`, `cudaMemsetAsync`, MTIA `runFunction…`) joined with the GPU rows of its
  correlation: CPU and GPU durations and `launch_delay = gpu.ts − (cpu.ts + cpu.dur)`, the time
  from the end of the call to the start of the GPU work (queueing behind earlier work included).

`hta_quirks=True` copies HTA where we disagree: each swept segment of the kernel-type time is cut
down to whole µs (HTA casts its float µs to int) and a negative launch delay counts as 0 (the GPU
work started before the launch call returned; HTA clips it). The rows come from
breakdown.selection (with its HTA window, HTA's rows).
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from gpulens.analyze.traces.breakdown import NON_COMPUTE, Selection, merge_intervals
from gpulens.analyze.traces.model import GPU_WORK_CATEGORIES, MISSING, Bools, Trace
from gpulens.analyze.traces.record import Record

KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")  # HTA's bit order (1, 2, 4)
_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
LAUNCH_NAMES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
)
RUNTIME_CUTOFF_NS = 50_000  # HTA's runtime_cutoff (50 µs)
LAUNCH_DELAY_CUTOFF_NS = 100_000  # HTA's launch_delay_cutoff (100 µs)


def kernel_type_label(mask: int) -> str:
    """`COMPUTATION overlapping MEMORY` … for a set of type bits (HTA's row names)."""
    return " overlapping ".join(t for i, t in enumerate(KERNEL_TYPES) if mask & (1 << i))


def kernel_type_codes(names: list[str]) -> npt.NDArray[np.int8]:
    """Index into KERNEL_TYPES per name, -1 for OTHER."""
    out = np.full(len(names), -1, dtype=np.int8)
    for i, n in enumerate(names):
        if _COMM.match(n):
            out[i] = 1
        elif _MEMORY.match(n):
            out[i] = 2
        elif NON_COMPUTE.match(n) is None:
            out[i] = 0
    return out


class KernelTypeTime(Record):
    """One rank's time per set of kernel types running together (ns), and the overlap."""

    times_ns: dict[str, int]  # kernel_type_label → ns; sets that never run are absent
    comm_comp_overlap_pct: float | None


def kernel_type_time(
    trace: Trace, rows: npt.NDArray[np.intp], *, whole_us: bool = False
) -> KernelTypeTime:
    """Sweep over the unions of each kernel type of `rows`.

    `whole_us`: cut each swept segment down to whole µs (HTA's int cast).
    """
    ev = trace.events
    used, inverse = np.unique(ev.name[rows], return_inverse=True)  # classify these names only
    names = [trace.names[i] if i >= 0 else "" for i in used.tolist()]
    types = kernel_type_codes(names)[inverse.reshape(-1)]
    ts = ev.ts_ns[rows]
    end = ts + ev.dur_ns[rows]
    times: list[npt.NDArray[np.int64]] = []
    deltas: list[npt.NDArray[np.int64]] = []
    for code in range(len(KERNEL_TYPES)):
        sel = types == code
        s, e = merge_intervals(ts[sel], end[sel])
        bit = 1 << code
        times += [s, e]
        deltas += [np.full(s.size, bit, np.int64), np.full(e.size, -bit, np.int64)]
    t = np.concatenate(times)
    if t.size == 0:
        return KernelTypeTime({}, None)
    order = np.argsort(t, kind="stable")
    t = t[order]
    running = np.cumsum(np.concatenate(deltas)[order])[:-1]
    seg = np.diff(t)
    width = 1 << len(KERNEL_TYPES)
    exact = np.bincount(running, weights=seg, minlength=width)
    counted = seg - seg % 1000 if whole_us else seg
    summed = np.bincount(running, weights=counted, minlength=width)
    out = {kernel_type_label(m): int(summed[m]) for m in range(1, width) if exact[m] > 0}
    comm = sum(int(exact[m]) for m in range(width) if m & 2)
    both = sum(int(exact[m]) for m in range(width) if m & 3 == 3)
    return KernelTypeTime(out, 100 * both / comm if comm else None)


class KernelTypeRow(Record):
    kernel_type: str
    sum_ns: int
    percentage: float  # of all rows' sum

    def to_dict(self) -> dict[str, object]:
        return {
            "kernel_type": self.kernel_type,
            "sum_us": self.sum_ns / 1000,
            "percentage": self.percentage,
        }


def kernel_type_breakdown(ranks: list[KernelTypeTime]) -> list[KernelTypeRow]:
    """HTA's `kernel_type_df`: the ranks' kernel-type times summed, most time first."""
    total: dict[str, int] = {}
    for r in ranks:
        for k, v in r.times_ns.items():
            total[k] = total.get(k, 0) + v
    whole = sum(total.values())
    rows = sorted(total.items(), key=lambda kv: -kv[1])
    return [KernelTypeRow(k, v, 100 * v / whole if whole else 0.0) for k, v in rows]


class LaunchStats(Record):
    """HTA's `get_cuda_kernel_launch_stats`, summarised (ns; `to_dict` in µs)."""

    n_launches: int
    cpu_duration_sum_ns: int
    gpu_duration_sum_ns: int
    launch_delay_sum_ns: int
    launch_delay_p50_ns: float
    n_gpu_shorter_than_cpu: int
    n_runtime_over_50us: int
    n_launch_delay_over_100us: int

    def to_dict(self) -> dict[str, object]:
        n = self.n_launches
        return {
            "n_launches": n,
            "cpu_duration_sum_us": self.cpu_duration_sum_ns / 1000,
            "gpu_duration_sum_us": self.gpu_duration_sum_ns / 1000,
            "launch_delay_sum_us": self.launch_delay_sum_ns / 1000,
            "launch_delay_mean_us": self.launch_delay_sum_ns / n / 1000 if n else None,
            "launch_delay_p50_us": self.launch_delay_p50_ns / 1000 if n else None,
            "n_gpu_shorter_than_cpu": self.n_gpu_shorter_than_cpu,
            "n_runtime_over_50us": self.n_runtime_over_50us,
            "n_launch_delay_over_100us": self.n_launch_delay_over_100us,
        }


def launch_stats(trace: Trace, cpu: Bools, gpu: Bools, *, hta_quirks: bool = False) -> LaunchStats:
    """Launch calls among the `cpu` rows joined with the `gpu` rows by correlation (every
    pair: a correlation with k CPU and m GPU rows gives k·m launches, as HTA's merge)."""
    ev = trace.events
    flags = np.asarray(
        [n in LAUNCH_NAMES or n.startswith("runFunction") for n in trace.names], dtype=np.bool_
    )
    corr = ev.correlation[trace.name_mask(flags) & (ev.correlation != MISSING)]
    linked = np.isin(ev.correlation, corr)  # repeats in `corr` change nothing: no unique()
    c_rows = np.flatnonzero(cpu & linked)
    g_rows = np.flatnonzero(gpu & linked)
    g_rows = g_rows[np.argsort(ev.correlation[g_rows], kind="stable")]
    g_corr = ev.correlation[g_rows]
    c_corr = ev.correlation[c_rows]
    lo = np.searchsorted(g_corr, c_corr, side="left")
    hi = np.searchsorted(g_corr, c_corr, side="right")
    n = hi - lo
    c = np.repeat(c_rows, n)
    starts = np.repeat(np.cumsum(n) - n - lo, n)
    g = g_rows[np.arange(c.size) - starts]
    cpu_dur, gpu_dur = ev.dur_ns[c], ev.dur_ns[g]
    delay = ev.ts_ns[g] - (ev.ts_ns[c] + cpu_dur)
    if hta_quirks:
        delay = np.maximum(delay, 0)
    return LaunchStats(
        int(c.size),
        int(cpu_dur.sum()),
        int(gpu_dur.sum()),
        int(delay.sum()),
        float(np.median(delay)) if c.size else 0.0,
        int((gpu_dur < cpu_dur).sum()),
        int((cpu_dur > RUNTIME_CUTOFF_NS).sum()),
        int((delay > LAUNCH_DELAY_CUTOFF_NS).sum()),
    )


class HtaFigures(Record):
    kernel_types: KernelTypeTime
    launches: LaunchStats


def hta_figures(trace: Trace, sel: Selection, *, hta_quirks: bool = False) -> HtaFigures:
    """Kernel-type time, overlap and launch statistics over the rows of `sel`.

    GPU rows: the work rows (kernels, copies, MTIA ccp) with a stream; with `hta_quirks`, as
    HTA, every selected row with a stream (cuda_sync included) and CPU rows those without.
    """
    ev = trace.events
    has_stream = ev.stream != MISSING
    if hta_quirks:
        gpu = sel.selected & has_stream
        cpu = sel.selected & ~has_stream
    else:
        gpu = sel.selected & trace.category_mask(GPU_WORK_CATEGORIES) & has_stream
        cpu = sel.selected & sel.cpu
    return HtaFigures(
        kernel_type_time(trace, np.flatnonzero(gpu), whole_us=hta_quirks),
        launch_stats(trace, cpu, gpu, hta_quirks=hta_quirks),
    )
