"""Benchmark the dcgm-exporter parser on a realistic 1,000-series page.

    .venv/bin/python bench/bench_dcgm_parse.py [--runs 200]

The page is built from the shape of a real capture (the loaded T4 page under
../shared/data/telemetry/cncf_k8s-ai-conformance, honouring GPULENS_SHARED): 8 GPUs x 25
fields x 5 pods sharing each GPU (dcgm-exporter copies every series per pod), with the real
label set, HELP/TYPE lines and value formats. It times `parse_exposition` and, as the
reference, prometheus_client's bare `text_string_to_metric_families` on the same page in the
same run (median of `--runs`). Prints a markdown table. Not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpulens.collect.dcgm.parse import parse_exposition

SHARED = Path(
    os.environ.get("GPULENS_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
T4 = SHARED / "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"
EXTRA = (  # recommended additions to the default CSV, with plausible values
    ("DCGM_FI_PROF_SM_ACTIVE", "0.142100"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "0.051230"),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "0.030112"),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "0.000000"),
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "70.000000"),
)
GPUS, PODS = 8, 5


def build_page() -> tuple[str, int]:
    """(page text, number of series)."""
    series: list[tuple[str, str, str]] = []  # name, labels, value
    for line in T4.read_text(encoding="utf-8").splitlines():
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        series.append((name, labels, value))
    labels0 = series[0][1]
    series += [(n, labels0, v) for n, v in EXTRA]
    assert len(series) == 25
    out: list[str] = []
    count = 0
    for name, labels, value in series:
        out.append(f"# HELP {name} {name}.")
        out.append(f"# TYPE {name} gauge")
        for gpu in range(GPUS):
            lab = labels.replace('gpu="0"', f'gpu="{gpu}"').replace(
                "e93ed57f469a", f"e93ed57f46{gpu:02x}"
            )
            for pod in range(PODS):
                extra = f',container="worker",namespace="team-a",pod="train-{gpu}-{pod}"'
                out.append(f"{name}{{{lab}{extra}}} {value}")
                count += 1
    return "\n".join(out) + "\n", count


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    page, n = build_page()
    result = parse_exposition(page, "bench", 0)
    ours = median_ms(lambda: parse_exposition(page, "bench", 0), args.runs)
    ref = median_ms(lambda: list(text_string_to_metric_families(page)), args.runs)
    print(
        f"page: {n} series, {len(page) / 1024:.0f} KiB, {len(result.readings) - 1} gpu readings\n"
    )
    print("| parser | median ms / page | µs / series | vs reference |")
    print("|---|---:|---:|---:|")
    print(f"| gpulens parse_exposition | {ours:.2f} | {ours * 1000 / n:.2f} | {ours / ref:.2f}x |")
    print(f"| prometheus_client (bare) | {ref:.2f} | {ref * 1000 / n:.2f} | 1.00x |")
    print(f"\ntarget <= 20 ms per 1,000-series page: {'met' if ours <= 20 else 'NOT met'}")


if __name__ == "__main__":
    main()
