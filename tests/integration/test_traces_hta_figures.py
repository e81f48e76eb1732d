"""Kernel-type breakdown, comm/comp overlap and launch statistics against HTA's `unrounded` outputs.

Reads ../shared/data/traces and ../shared/data/traces-reference in place (the `shared` fixture),
one parameter per case of cases.csv that HTA completed (a folder with its outputs). The figures
come from `gpulens trace --format json --hta-window` (`analyze_traces(..., hta_window=True)` and
the report's JSON), compared with the tolerance of test_traces_reference.py: 0.1 µs or 0.01 %
(HTA rounds the kernel-type `percentage` to 0.1 and the overlap to 0.01: within half a step).
Where we disagree on purpose (default mode) a test shows our figure and how HTA's follows from it.
"""

from __future__ import annotations

import csv
import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hta_cases import REFERENCE, close, reference_cases
from tests.conftest import shared_dir

from gpulens.analyze.traces.breakdown import Selection, selection
from gpulens.analyze.traces.hta_figures import kernel_type_time, launch_stats
from gpulens.analyze.traces.model import MISSING, Bools, Trace
from gpulens.app.traces import analyze_traces, load_trace_file
from gpulens.present.reports.trace import build_view, to_json

LAUNCH_FIELDS = (
    "n_launches",
    "cpu_duration_sum",
    "gpu_duration_sum",
    "launch_delay_sum",
    "launch_delay_mean",
    "launch_delay_p50",
    "n_gpu_shorter_than_cpu",
    "n_runtime_over_50us",
    "n_launch_delay_over_100us",
)


def _cases(shared: Path) -> dict[str, dict[int, Path]]:
    return reference_cases(shared, completed=True)


def _case_names() -> list[str]:
    path = shared_dir()
    return sorted(_cases(path)) if (path / REFERENCE / "cases.csv").is_file() else []


def _hta(shared: Path, case: str, name: str) -> list[dict[str, str]]:
    path = shared / REFERENCE / case / "unrounded" / f"{name}.csv"
    return list(csv.DictReader(path.open(encoding="utf-8")))


@cache
def _doc(case: str, hta_window: bool) -> dict[str, Any]:
    """The trace JSON of the case (as `gpulens trace --format json [--hta-window]`)."""
    files = _cases(shared_dir())[case]
    traces = [load_trace_file(p, rank=r) for r, p in files.items()]
    doc: dict[str, Any] = json.loads(
        to_json(build_view(analyze_traces(traces, hta_window=hta_window)))
    )
    return doc


def _ranks(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r for r in doc["ranks"]}


CASES = _case_names()


def test_every_case_is_compared(shared: Path) -> None:
    assert len(CASES) == 15 == len(_cases(shared))


@pytest.mark.parametrize("case", CASES)
def test_kernel_type_breakdown_matches_hta(shared: Path, case: str) -> None:
    hta = _hta(shared, case, "kernel_type_breakdown")
    ours = {r["kernel_type"]: r for r in _doc(case, True)["kernel_type_breakdown"]}
    listed = {r["kernel_type"] for r in hta}
    # rows HTA lists with 0 µs (sets that only ran for an instant) may be absent here
    assert set(ours) <= listed, (case, set(ours) - listed)
    for row in hta:
        got = ours.get(row["kernel_type"])
        if got is None:
            assert float(row["sum"]) == 0, (case, row)
            continue
        assert close(got["sum_us"], float(row["sum"])), (case, row["kernel_type"])
        assert abs(got["percentage"] - float(row["percentage"])) <= 0.05 + 1e-9, (case, row)


@pytest.mark.parametrize("case", CASES)
def test_comm_comp_overlap_matches_hta(shared: Path, case: str) -> None:
    ranks = _ranks(_doc(case, True))
    hta = _hta(shared, case, "comm_comp_overlap")
    assert {int(r["rank"]) for r in hta} == set(ranks)
    for row in hta:
        ours = ranks[int(row["rank"])]["comm_comp_overlap_pct"]
        if row["comp_comm_overlap_pctg"] in ("", "nan", "NaN"):
            assert ours is None, case  # no communication kernels: HTA prints NaN
        else:
            assert ours is not None, case
            assert abs(ours - float(row["comp_comm_overlap_pctg"])) <= 0.005 + 1e-9, case


@pytest.mark.parametrize("case", CASES)
def test_launch_stats_match_hta(shared: Path, case: str) -> None:
    ranks = _ranks(_doc(case, True))
    hta = _hta(shared, case, "cuda_kernel_launch_stats_summary")
    assert hta
    for row in hta:
        ours = ranks[int(row["rank"])]["launch_stats"]
        for name in LAUNCH_FIELDS:
            key = name if name.startswith("n_") else f"{name}_us"
            if row[name] == "":
                assert ours[key] is None, (case, name)  # no launches: HTA's mean is NaN
            else:
                assert close(ours[key], float(row[name])), (case, row["rank"], name)


def _hta_rows(case: str) -> tuple[Trace, Selection, Bools]:
    """The single-rank case's trace, HTA's selection and its GPU rows (selected, with a stream)."""
    (path,) = _cases(shared_dir())[case].values()
    trace = load_trace_file(path)
    sel = selection(trace, hta_window=True)
    return trace, sel, sel.selected & (trace.events.stream != MISSING)


def test_kernel_type_time_is_exact_where_hta_truncates(shared: Path) -> None:
    """HTA casts each swept segment's float µs to int: on H100 Qwen (sub-µs kernels) its MEMORY
    row keeps 59 of 214.602 µs. Ours is exact, and its COMPUTATION row equals HTA's own temporal
    compute time; cutting each segment to whole µs gives HTA's rows."""
    case = "tracelens_h100_qwen"
    trace, _, gpu = _hta_rows(case)
    rows = np.flatnonzero(gpu)
    hta = {r["kernel_type"]: float(r["sum"]) for r in _hta(shared, case, "kernel_type_breakdown")}
    exact = kernel_type_time(trace, rows).times_ns
    (temporal,) = _hta(shared, case, "temporal_breakdown")
    assert close(exact["COMPUTATION"] / 1000, float(temporal["compute_time(us)"]))
    assert not close(exact["COMPUTATION"] / 1000, hta["COMPUTATION"])
    assert not close(exact["MEMORY"] / 1000, hta["MEMORY"])
    cut = kernel_type_time(trace, rows, whole_us=True).times_ns
    assert {k: v / 1000 for k, v in cut.items()} == hta


def test_negative_launch_delays_are_kept_where_hta_clips(shared: Path) -> None:
    """A GPU row may start before its launch call returns (negative delay); HTA counts 0 there.
    Ours keeps the sign; clipping at 0 gives HTA's sum."""
    case = "hta_nccl_data_a100_r0of2"
    trace, sel, gpu = _hta_rows(case)
    (row,) = _hta(shared, case, "cuda_kernel_launch_stats_summary")
    ours = launch_stats(trace, sel.selected & ~gpu, gpu)
    clipped = launch_stats(trace, sel.selected & ~gpu, gpu, hta_quirks=True)
    assert ours.n_launches == clipped.n_launches == int(row["n_launches"])
    assert ours.launch_delay_sum_ns < clipped.launch_delay_sum_ns
    assert not close(ours.launch_delay_sum_ns / 1000, float(row["launch_delay_sum"]))
    assert close(clipped.launch_delay_sum_ns / 1000, float(row["launch_delay_sum"]))


def test_default_mode_json_has_every_figure(shared: Path) -> None:
    doc = _doc("hta_trace_filter_sampled_2ranks", False)
    kinds = [r["kernel_type"] for r in doc["kernel_type_breakdown"]]
    assert kinds[:2] == ["COMMUNICATION", "COMPUTATION"]
    assert sum(r["percentage"] for r in doc["kernel_type_breakdown"]) == pytest.approx(100)
    for rank in doc["ranks"]:
        assert 0 < rank["comm_comp_overlap_pct"] < 100
        stats = rank["launch_stats"]
        assert stats["n_launches"] > 0
        assert stats["launch_delay_mean_us"] == pytest.approx(
            stats["launch_delay_sum_us"] / stats["n_launches"]
        )


def test_reports_show_the_kernel_types_and_compare_the_new_figures(shared: Path) -> None:
    """The Markdown report has the job's kernel-type table with HTA's rows and shares; --compare
    sets the overlap and the launch figures of each rank side by side."""
    from gpulens.present.reports.trace import compare_docs, to_markdown

    case = "hta_trace_filter_sampled_2ranks"
    files = _cases(shared)[case]
    traces = [load_trace_file(p, rank=r) for r, p in files.items()]
    view = build_view(analyze_traces(traces, hta_window=True))
    text = to_markdown(view)
    table = text.split("### Kernel types (HTA)", 1)[1].split("\n\n", 2)[1]
    shown = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    rows = _hta(shared, case, "kernel_type_breakdown")
    hta = {r["kernel_type"]: float(r["percentage"]) for r in rows if float(r["sum"]) > 0}
    assert set(shown) == set(hta)
    for kind, pct in hta.items():
        share = float(shown[kind].rsplit(" | ", 1)[1].rstrip("%| "))
        assert abs(share - pct) <= 0.05 + 0.05 + 1e-9, (kind, shown[kind])  # HTA's and ours
    before, after = _doc("hta_trace_diff_control_a100_r3of8", True), _doc(case, True)
    figures = compare_docs(before, after)["ranks"][0]["figures"]
    b, a = before["ranks"][0], after["ranks"][0]
    assert figures["kernel_launches"]["before"] == b["launch_stats"]["n_launches"]
    assert figures["kernel_launches"]["after"] == a["launch_stats"]["n_launches"]
    assert figures["launch_delay_p50_us"]["after"] == a["launch_stats"]["launch_delay_p50_us"]
    overlap = figures["comm_comp_overlap_share"]
    assert overlap["before"] == pytest.approx(b["comm_comp_overlap_pct"] / 100)
    assert overlap["after"] == pytest.approx(a["comm_comp_overlap_pct"] / 100)
