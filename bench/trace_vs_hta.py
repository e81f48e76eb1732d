"""gpulens against HTA on equal work, each tool as a whole process, per reference case.

    .venv/bin/python bench/trace_vs_hta.py --hta-python HTA-VENV/bin/python [--runs 3]

HTA's venv (outside the repository): `python -m venv hta-venv && hta-venv/bin/pip install
traceinsight==0.6.1 'pandas<3'`. HTA runs bench/hta_driver.py with `HTA_DISABLE_NS_ROUNDING=1`
(its exact mode, the numbers gpulens reproduces).

For every case of ../shared/data/traces-reference/cases.csv (or GPULENS_SHARED), one fresh
process per measurement:

  (a) the user's whole task: `gpulens trace FILES --format json` (everything it computes: every
      analysis of every rank, the cluster, the findings, the JSON) against HTA loading the
      files and running the analyses whose results gpulens reports (temporal, idle time,
      kernel-type breakdown, comm/comp overlap, CUDA kernel launch stats; every rank);
  (b) equal narrow work: HTA loading + its temporal and idle time breakdowns, against gpulens
      loading + the same two breakdowns (HTA's window and quirks, every rank), and against the
      whole `gpulens trace` command of (a), which does more;
  load: each tool loading the files and nothing else.

Each run of a case goes through the six processes alternating gpulens and HTA (gpulens first on
even runs, HTA first on odd ones); figures are medians of `--runs`. Wall time is the process's
from start to exit (interpreter start-up and imports included), peak memory its maximum RSS
from `wait4` (as `/usr/bin/time -v` reports it; for a child that forks, the largest single
process, not their sum). Size buckets by uncompressed JSON: < 5 MB, 5-20 MB, >= 20 MB. Prints
markdown tables: per case, per bucket, and the targets.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from traces import OURS_BREAKDOWN

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("GPULENS_SHARED", HERE.parent.parent / "shared"))
REFERENCE = SHARED / "data/traces-reference"
TRACES = SHARED / "data/traces"

# load + temporal + idle breakdowns: the same driver as traces.py's breakdown work
OURS_NARROW = OURS_BREAKDOWN

OURS_LOAD = """
import json, sys
from gpulens.app.traces import load_trace_file
files = json.loads(sys.argv[1])
traces = [load_trace_file(path, rank=int(rank)) for rank, path in files.items()]
print(json.dumps({"events": sum(len(t.events) for t in traces)}))
"""

# (key, tool): gpulens and HTA alternate; odd runs take the pairs in the other order
PAIRS = [("ours_all", "hta_all"), ("ours_narrow", "hta_narrow"), ("ours_load", "hta_load")]
BUCKETS = [("< 5 MB", 0.0, 5.0), ("5-20 MB", 5.0, 20.0), (">= 20 MB", 20.0, float("inf"))]


class Runner:
    """Runs processes one at a time and attributes each child's peak RSS to it."""

    def run(self, argv: list[str], env: dict[str, str], *, timings: bool) -> dict:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        # the JSON of `gpulens trace` can exceed a pipe's buffer: read it all before waiting
        out = proc.stdout.read()
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            tail = err.decode(errors="replace")[-2000:]
            raise RuntimeError(f"{argv[:3]} exited {proc.returncode}:\n{tail}")
        result = {"wall_s": wall, "rss_mib": usage.ru_maxrss / 1024, "out_bytes": len(out)}
        if timings:  # a driver's one JSON line (not the JSON `gpulens trace` writes)
            lines = [x for x in out.decode().splitlines() if x.startswith("{")]
            result.update(json.loads(lines[-1]) if lines else {})
        return result


def _json_mb(files: dict[str, str]) -> float:
    total = 0
    for path in files.values():
        with gzip.open(path) as f:
            total += sum(len(block) for block in iter(lambda f=f: f.read(1 << 20), b""))
    return total / 1e6


def _compile_ours() -> None:
    """Write gpulens's bytecode, as pip does when it installs the package (see traces.py)."""
    package = HERE.parent / "src" / "gpulens"
    if package.is_dir():
        compileall.compile_dir(package, quiet=1)


def _gpulens_command(given: str | None) -> str:
    if given:
        return given
    return str(Path(sys.executable).parent / "gpulens")


def _ratio(ours: float, hta: float) -> str:
    if not hta or hta != hta:
        return "-"
    return f"{ours / hta:.3f} ({hta / ours:.1f}×)" if ours else "-"


def _mratio(ours: float, hta: float) -> str:
    return f"{ours / hta:.2f}" if hta and hta == hta else "-"


def measure_case(
    runner: Runner,
    runs: int,
    files: dict[str, str],
    gpulens: str,
    hta_python: str,
    env: dict[str, str],
    hta_env: dict[str, str],
) -> dict[str, dict]:
    spec = json.dumps(files)
    ordered = [files[r] for r in sorted(files, key=int)]
    argv = {
        "ours_all": [gpulens, "trace", *ordered, "--format", "json"],
        "ours_narrow": [sys.executable, "-c", OURS_NARROW, spec],
        "ours_load": [sys.executable, "-c", OURS_LOAD, spec],
        "hta_all": [hta_python, str(HERE / "hta_driver.py"), "all", spec],
        "hta_narrow": [hta_python, str(HERE / "hta_driver.py"), "narrow", spec],
        "hta_load": [hta_python, str(HERE / "hta_driver.py"), "load", spec],
    }
    results: dict[str, list[dict]] = {k: [] for k in argv}
    for i in range(runs):
        for pair in PAIRS:
            for key in pair if i % 2 == 0 else reversed(pair):
                hta = key.startswith("hta")
                results[key].append(
                    runner.run(argv[key], hta_env if hta else env, timings=key != "ours_all")
                )
    medians = {}
    for key, rs in results.items():
        m = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "rss_mib")}
        for k in ("load_s", "analyze_s"):
            if all(k in r for r in rs):
                m[k] = statistics.median(r[k] for r in rs)
        m["errors"] = sorted({e for r in rs for e in r.get("errors", [])})
        m["failed"] = any(r.get("failed") for r in rs)
        medians[key] = m
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--hta-python", required=True, help="the Python of a venv with traceinsight 0.6.1"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per case (medians)")
    parser.add_argument("--gpulens", help="the gpulens command (default: next to this Python)")
    parser.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = parser.parse_args()
    _compile_ours()
    gpulens = _gpulens_command(args.gpulens)
    env = dict(os.environ)
    hta_env = {**env, "HTA_DISABLE_NS_ROUNDING": "1"}
    with (REFERENCE / "cases.csv").open(encoding="utf-8") as f:
        cases = list(csv.reader(f))[1:]
    if args.cases:
        cases = [c for c in cases if c[0] in args.cases]
    runner = Runner()
    start_load = _loadavg()
    print(f"gpulens: {_source_state()}; HTA: `{args.hta_python}`.\n")
    print(
        f"Medians of {args.runs} run(s) per case, one process per measurement, gpulens and HTA "
        "alternating. Wall s: process start to exit. Ratio: gpulens / HTA (× = HTA / gpulens). "
        "(b) gpulens: load + temporal + idle breakdowns; `trace` = the whole command of (a).\n",
        flush=True,
    )
    print(
        "| case | JSON MB | (a) gpulens `trace` s | (a) HTA s | (a) ratio | (b) gpulens s "
        "| (b) HTA s | (b) ratio | (b) `trace` / HTA | load gpulens s | load HTA s "
        "| load ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        flush=True,
    )
    rows = []
    for case, spec in cases:
        files = {r: str(TRACES / p) for r, p in json.loads(spec).items()}
        mb = _json_mb(files)
        m = measure_case(runner, args.runs, files, gpulens, args.hta_python, env, hta_env)
        rows.append((case, mb, m))
        w = {k: v["wall_s"] for k, v in m.items()}
        failed = m["hta_load"]["failed"] or m["hta_all"]["failed"]
        hta = {k: "failed" if failed else f"{v:.2f}" for k, v in w.items()}
        print(
            f"| {case} | {mb:.1f} | {w['ours_all']:.2f} | {hta['hta_all']} | "
            f"{_ratio(w['ours_all'], w['hta_all']) if not failed else '-'} | "
            f"{w['ours_narrow']:.2f} | {hta['hta_narrow']} | "
            f"{_ratio(w['ours_narrow'], w['hta_narrow']) if not failed else '-'} | "
            f"{_ratio(w['ours_all'], w['hta_narrow']) if not failed else '-'} | "
            f"{w['ours_load']:.2f} | {hta['hta_load']} | "
            f"{_ratio(w['ours_load'], w['hta_load']) if not failed else '-'} |",
            flush=True,
        )
    print(f"\nLoad average at the end (1, 5, 15 min): {_loadavg()}; at the start: {start_load}.")
    _memory_table(rows)
    _split_table(rows)
    _bucket_table(rows)
    _targets(rows)
    errors = [f"{c}: {e}" for c, _, m in rows for k in m for e in m[k]["errors"]]
    if errors:
        print("\nHTA analyses that raised (their time still counts): " + "; ".join(errors))


def _source_state() -> str:
    """The commit gpulens runs from, and whether its sources differ from it."""
    git = ["git", "-C", str(HERE.parent)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True)
    except OSError:
        return "not a git checkout"
    if head.returncode != 0:
        return "not a git checkout"
    state = "with uncommitted changes under src/" if dirty.stdout.strip() else "clean"
    return f"commit {head.stdout.decode().strip()}, {state}"


def _loadavg() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def _memory_table(rows: list) -> None:
    print(
        "\nPeak RSS (MiB), medians; ratio gpulens / HTA.\n\n"
        "| case | (a) gpulens `trace` | (a) HTA | (a) ratio | (b) gpulens | (b) HTA "
        "| (b) ratio | load gpulens | load HTA | load ratio |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for case, _, m in rows:
        r = {k: v["rss_mib"] for k, v in m.items()}
        print(
            f"| {case} | {r['ours_all']:.0f} | {r['hta_all']:.0f} | "
            f"{_mratio(r['ours_all'], r['hta_all'])} | {r['ours_narrow']:.0f} | "
            f"{r['hta_narrow']:.0f} | {_mratio(r['ours_narrow'], r['hta_narrow'])} | "
            f"{r['ours_load']:.0f} | {r['hta_load']:.0f} | "
            f"{_mratio(r['ours_load'], r['hta_load'])} |"
        )


def _split_table(rows: list) -> None:
    print(
        "\nWhere the time goes inside the (b) processes (s, medians; the rest of the wall time "
        "is interpreter start-up and imports before the clock starts, and exit).\n\n"
        "| case | gpulens load | gpulens temporal + idle | HTA load (import included) "
        "| HTA temporal + idle | HTA (a) analyses |\n|---|---:|---:|---:|---:|---:|"
    )
    for case, _, m in rows:
        o, h, a = m["ours_narrow"], m["hta_narrow"], m["hta_all"]
        print(
            f"| {case} | {o.get('load_s', 0):.3f} | {o.get('analyze_s', 0):.3f} | "
            f"{h.get('load_s', 0):.2f} | {h.get('analyze_s', 0):.2f} | "
            f"{a.get('analyze_s', 0):.2f} |"
        )


def _usable(m: dict) -> bool:
    return not (m["hta_load"]["failed"] or m["hta_all"]["failed"] or m["hta_narrow"]["failed"])


def _bucket_table(rows: list) -> None:
    print(
        "\nPer size bucket (uncompressed JSON), over the cases HTA loads: sums of the per-case "
        "medians, ratio gpulens / HTA of the sums, and in brackets the worst case's ratio.\n\n"
        "| bucket | cases | (a) wall s gpulens / HTA | (a) ratio | (b) wall s gpulens / HTA "
        "| (b) ratio | (b) `trace` / HTA | load wall s gpulens / HTA | load ratio "
        "| (a) peak MiB gpulens / HTA | (a) memory ratio | (b) memory ratio "
        "| load memory ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for label, low, high in BUCKETS:
        ms = [m for _, mb, m in rows if low <= mb < high and _usable(m)]
        if not ms:
            continue

        def tot(key: str, field: str, ms: list = ms) -> float:
            return sum(m[key][field] for m in ms)

        def worst(ours: str, hta: str, field: str, ms: list = ms) -> float:
            return max(m[ours][field] / m[hta][field] for m in ms)

        def cell(ours: str, hta: str, field: str) -> str:
            total = tot(ours, field) / tot(hta, field)
            return f"{total:.3f} ({1 / total:.1f}×) [{worst(ours, hta, field):.3f}]"

        def mcell(ours: str, hta: str) -> str:
            total = tot(ours, "rss_mib") / tot(hta, "rss_mib")
            return f"{total:.2f} [{worst(ours, hta, 'rss_mib'):.2f}]"

        print(
            f"| {label} | {len(ms)} | {tot('ours_all', 'wall_s'):.2f} / "
            f"{tot('hta_all', 'wall_s'):.2f} | {cell('ours_all', 'hta_all', 'wall_s')} | "
            f"{tot('ours_narrow', 'wall_s'):.2f} / {tot('hta_narrow', 'wall_s'):.2f} | "
            f"{cell('ours_narrow', 'hta_narrow', 'wall_s')} | "
            f"{cell('ours_all', 'hta_narrow', 'wall_s')} | "
            f"{tot('ours_load', 'wall_s'):.2f} / {tot('hta_load', 'wall_s'):.2f} | "
            f"{cell('ours_load', 'hta_load', 'wall_s')} | "
            f"{tot('ours_all', 'rss_mib'):.0f} / {tot('hta_all', 'rss_mib'):.0f} | "
            f"{mcell('ours_all', 'hta_all')} | {mcell('ours_narrow', 'hta_narrow')} | "
            f"{mcell('ours_load', 'hta_load')} |"
        )


def _targets(rows: list) -> None:
    usable = [(c, mb, m) for c, mb, m in rows if _usable(m)]

    def speed(m: dict, ours: str, hta: str) -> float:
        return m[hta]["wall_s"] / m[ours]["wall_s"]

    print("\nTargets (every case HTA loads; speed-up = HTA wall / gpulens wall):\n")
    for label, low, high, need in (("≥ 20 MB", 20.0, float("inf"), 10.0), ("5-20 MB", 5, 20, 5)):
        sel = [(c, m) for c, mb, m in usable if low <= mb < high]
        if not sel:
            continue
        for ours, what in (("ours_narrow", "gpulens (b)"), ("ours_all", "`gpulens trace`")):
            worst = min(sel, key=lambda cm, o=ours: speed(cm[1], o, "hta_narrow"))
            value = speed(worst[1], ours, "hta_narrow")
            state = "met" if value >= need else "not met"
            print(
                f"- (b) {label}, ≥ {need:.0f}× faster, {what} against HTA load + temporal + "
                f"idle: **{state}**, slowest case {worst[0]} {value:.1f}×"
            )
    for ours, hta, what in (
        ("ours_all", "hta_all", "(a)"),
        ("ours_narrow", "hta_narrow", "(b)"),
        ("ours_load", "hta_load", "load"),
    ):
        worst = max(usable, key=lambda r, o=ours, h=hta: r[2][o]["rss_mib"] / r[2][h]["rss_mib"])
        value = worst[2][ours]["rss_mib"] / worst[2][hta]["rss_mib"]
        total = sum(m[ours]["rss_mib"] for _, _, m in usable) / sum(
            m[hta]["rss_mib"] for _, _, m in usable
        )
        state = "met" if value <= 0.25 else "not met"
        print(
            f"- peak memory ≤ ¼ of HTA's on every case, {what}: **{state}**, worst "
            f"{worst[0]} {value:.2f}; summed over the cases {total:.2f}"
        )


if __name__ == "__main__":
    main()
