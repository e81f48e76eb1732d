"""recent_intervals (numpy over the window's Arrow tables) equals gpu_intervals (DuckDB SQL over
the same window's views): every column, type, row and value, on the simulated fleet with the
cases the SQL handles specially added, and on real dcgm-exporter pages."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from present.sim import NS, START, fleet, ticks

from gpulens import catalog
from gpulens.collect.dcgm.parse import parse_exposition
from gpulens.model import Kind, Reading
from gpulens.store.frames import COLUMNS, gpu_intervals
from gpulens.store.query import QueryError
from gpulens.store.recent import RecentWindow
from gpulens.store.recent_frame import _try_cast_bigint, recent_intervals

SECONDS = 420  # 7 minutes of 1 s ticks
MIG = {"host": "sim-node-0", "gpu_uuid": "MIG-7c1e", "gpu_index": "0", "mig_instance": "1",
       "mig_profile": "1g.10gb", "parent_uuid": "GPU-a100", "gpu_model": "NVIDIA A100"}  # fmt: skip
MIG2 = {**MIG, "gpu_uuid": "MIG-7c1f", "mig_instance": "2"}
LONE = {"host": "sim-node-1", "gpu_uuid": "GPU-lone", "gpu_index": "7"}
GAP = (250, 300)  # seconds without readings of one simulated GPU (the cap is 2 s)
RESET_S = 200  # the MIG instance's energy counter restarts from zero (driver reload)
BUSY = catalog.POWER_REASON_BITS & -catalog.POWER_REASON_BITS  # one power-capping bit


def _extra(s: int, ts: int) -> list[Reading]:
    """What the simulated fleet does not produce: MIG instances reporting the clocks event
    mask only (no throttle ratios) and an energy counter that resets; processes of equal
    peak memory on one instance (ties go to the lowest pid: 999, not '1000' < '999'); app
    readings for that GPU and job-wide ones; a GPU with a single reading."""
    out: list[Reading] = []
    energy = (s - RESET_S if s >= RESET_S else s + 5000) * 40.0
    mask = float(BUSY if s % 6 == 0 else 0) + float(s % 10 == 0)  # some power, some idle
    # the first instance reports every 2 s; the second every 2 s, then every 7 s (its sampling
    # interval, the median of its buckets' spacings, differs from their mean)
    for labels, util, every in (
        (MIG, 0.3 + (s % 7) / 20, 2),
        (MIG2, (s % 5) / 5, 2 if s < 200 else 7),
    ):
        if s % every == 0:
            values = {"gpu_util_ratio": util, "sm_active_ratio": util / 2,
                      "clocks_event_reasons": mask, "energy_joules": energy,
                      "power_watts": 40.0 + s % 3, "memory_used_bytes": 1e9 + s * 1e6}  # fmt: skip
            out.append(Reading(Kind.GPU, ts, labels, values))
    if s % 2 == 0:
        for pid, job, mem in (("999", "job-a", 3e9), ("1000", "job-b", 3e9), ("5", "job-c", 1e9)):
            labels = {**MIG, "pid": pid, "job_id": job, "user": f"u{pid}"}
            out.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": mem}))
        out.append(
            Reading(
                Kind.APP,
                ts,
                {"job_id": "job-a", "gpu_uuid": MIG["gpu_uuid"]},
                {"app_tokens_per_second": 100.0 + s},
            )
        )
        out.append(
            Reading(
                Kind.APP,
                ts,
                {"job_id": "job-a"},
                {"app_tokens_per_second": 1.0, "app_data_wait_ratio": (s % 4) / 4},
            )
        )
    if s == 130:
        out.append(Reading(Kind.GPU, ts, LONE, {"gpu_util_ratio": 0.5, "power_watts": 70.0}))
    return out


def _edit(r: Reading, s: int, gapped: str, mask_only: str) -> Reading | None:
    """Drop one GPU's readings inside GAP; strip the throttle ratios of another (only
    `clocks_event_reasons` is left)."""
    if r.kind is not Kind.GPU:
        return r
    uuid = r.labels.get("gpu_uuid")
    if uuid == gapped and GAP[0] <= s < GAP[1]:
        return None
    if uuid == mask_only:
        values = {k: v for k, v in r.values.items() if not k.startswith("throttle_")}
        return Reading(r.kind, r.ts, dict(r.labels), values)
    return r


@pytest.fixture(scope="module")
def window() -> RecentWindow:
    sim = fleet(hosts=2, gpus_per_host=4, seed=5,
                scenarios=["input_bound_training", "eager_inference", "idle_allocated",
                           "throttled"])  # fmt: skip
    win = RecentWindow(keep_s=SECONDS)
    uuids: list[str] = []
    for s, tick in enumerate(ticks(sim, 0, SECONDS)):
        if not uuids:
            uuids = sorted(str(r.labels["gpu_uuid"]) for r in tick.readings if r.kind is Kind.GPU)
        kept = [e for r in tick.readings if (e := _edit(r, s, uuids[0], uuids[1])) is not None]
        win.append(tick.ts, kept + _extra(s, tick.ts))
    return win


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.column_names == list(COLUMNS)
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        for i, (a, b) in enumerate(
            zip(got.column(name).to_pylist(), want.column(name).to_pylist(), strict=True)
        ):
            if isinstance(a, float) and isinstance(b, float):  # NaN is a value, not null
                same = (math.isnan(a) and math.isnan(b)) or math.isclose(
                    a, b, rel_tol=1e-9, abs_tol=1e-12
                )
                assert same, (name, i, a, b)
            else:
                assert a == b, (name, i, a, b)


def _live_span(win: RecentWindow, step_s: float) -> tuple[int, int]:
    """The span LiveState refreshes: the interval still filling and the two before it."""
    assert win.latest_ns is not None
    step_ns = round(step_s * NS)
    end = (win.latest_ns // step_ns + 1) * step_ns
    return end - 3 * step_ns, end


@pytest.mark.parametrize("step_s", [60.0, 30.0, 20.0, 10.0, 1.0, 0.5])
def test_the_live_span_equals_the_sql_frame(window: RecentWindow, step_s: float) -> None:
    start, end = _live_span(window, step_s)
    want = gpu_intervals(window, step_s, start, end, use_cache=False)
    _same(recent_intervals(window, step_s, start, end), want)
    assert want.num_rows >= 8  # every simulated GPU has a row


@pytest.mark.parametrize("step_s", [60.0, 15.0])
def test_the_whole_window_equals_the_sql_frame(window: RecentWindow, step_s: float) -> None:
    want = gpu_intervals(window, step_s, use_cache=False)
    got = recent_intervals(window, step_s)
    _same(got, want)
    rows = want.to_pylist()
    mig = [r for r in rows if r["gpu_uuid"] == MIG["gpu_uuid"]]
    # the cases the fixture adds are in the frame, so they were compared above
    assert mig and all(r["mig_instance"] == "1" and r["parent_uuid"] == "GPU-a100" for r in mig)
    assert all(r["pid"] == "999" and r["job_id"] == "job-a" and r["processes"] == 3 for r in mig)
    assert all(r["process_memory_bytes"] == 7e9 for r in mig)
    assert all(r["tokens_per_s"] > 100 and r["data_wait"] is not None for r in mig)
    assert all(r["throttle_power"] is not None and r["clock_idle"] is not None for r in mig)
    assert {r["energy_j"] is None or r["energy_j"] >= 0 for r in mig} == {True}
    lone = [r for r in rows if r["gpu_uuid"] == LONE["gpu_uuid"]]
    assert len(lone) == 1 and lone[0]["samples"] == 1 and lone[0]["covered_s"] == 0.0
    assert any(r["no_data_s"] > 20 for r in rows)  # the gap
    assert any(r["host_cpu"] is not None for r in rows)
    assert any(r["job_id"] is not None and r["gpu_uuid"] != MIG["gpu_uuid"] for r in rows)


def test_a_step_finer_than_its_buckets_goes_to_sql(window: RecentWindow) -> None:
    start, end = _live_span(window, 45.0)  # coverage on 15 s buckets: the SQL path
    _same(recent_intervals(window, 45.0, start, end), gpu_intervals(window, 45.0, start, end,
                                                                     use_cache=False))  # fmt: skip


def test_an_empty_span_has_the_frame_columns(window: RecentWindow) -> None:
    got = recent_intervals(window, 60.0, START - 600 * NS, START)
    _same(got, gpu_intervals(window, 60.0, START - 600 * NS, START, use_cache=False))
    assert got.num_rows == 0
    with pytest.raises(ValueError, match="step_s"):
        recent_intervals(window, 0.0)


def test_window_tables_have_the_view_columns(window: RecentWindow) -> None:
    for kind in Kind:
        table = window.table(kind)
        view = window.query(f"SELECT * FROM {kind.value}")
        assert sorted(table.column_names) == sorted(view.column_names)
        assert table.num_rows == view.num_rows


CNCF = "data/telemetry/cncf_k8s-ai-conformance/v1.35"
PAGES = (
    "ericsson-ccd/accelerator_metrics.prom",
    "rafay/accelator_metrics.prom",
    "kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.prom",
    "vks/accelerator_metrics.prom",
)


def test_real_dcgm_exporter_pages(shared: Path) -> None:
    """Captured dcgm-exporter pages scraped every 5 s for 4 minutes (each page its own host),
    one page missing for a minute and one scraped only once."""
    texts = [(p, (shared / CNCF / p).read_text()) for p in PAGES]
    win = RecentWindow(keep_s=600)
    for s in range(0, 240, 5):
        ts = START + s * NS
        readings: list[Reading] = []
        for i, (name, text) in enumerate(texts):
            if (i == 1 and 60 <= s < 120) or (i == 3 and s != 100):
                continue
            readings += parse_exposition(text, name, ts, default_host=f"node-{i}").readings
        win.append(ts, readings)
    for step_s in (60.0, 10.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        assert want.num_rows > 0
        _same(recent_intervals(win, step_s), want)
        start, end = _live_span(win, step_s)
        _same(recent_intervals(win, step_s, start, end),
              gpu_intervals(win, step_s, start, end, use_cache=False))  # fmt: skip


def test_importing_the_live_state_does_not_load_duckdb() -> None:
    code = "import sys, gpulens.app.live; print('duckdb' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- cases the simulated fleet does not reach -----------------------------------------------------

MIDNIGHT = 1_700_006_400 * NS  # 2023-11-15 00:00:00 UTC
NOON = MIDNIGHT + 12 * 3600 * NS


def _window(readings: list[Reading], keep_s: float = 3600.0) -> RecentWindow:
    """A window holding `readings`, appended tick by tick in time order."""
    win = RecentWindow(keep_s=keep_s)
    by_ts: dict[int, list[Reading]] = {}
    for r in readings:
        by_ts.setdefault(r.ts, []).append(r)
    for ts in sorted(by_ts):
        win.append(ts, by_ts[ts])
    return win


def _gpu(uuid: str, ts: int, **values: float) -> Reading:
    return Reading(Kind.GPU, ts, {"host": "node-a", "gpu_uuid": uuid, "gpu_index": "0"}, values)


def _row(frame: pa.Table, uuid: str, start_ns: int) -> dict[str, object]:
    rows = [r for r in frame.to_pylist() if r["gpu_uuid"] == uuid and r["start_ns"] == start_ns]
    assert len(rows) == 1, rows
    row: dict[str, object] = rows[0]
    return row


def test_the_coverage_cap_rounds_halves_to_even_as_duckdb_casts() -> None:
    """The cap is `(2 × spacing)::BIGINT`, and DuckDB casts a DOUBLE to BIGINT with halves to
    even. GPU-half: spacing estimates (2e9 + 1) / 2 and 1e9 ns, median 1e9 + 0.25, cap
    2e9 + 0.5 → 2e9 (halves away from zero would give 2e9 + 1); GPU-odd: 2e9 + 1.5 → 2e9 + 2.
    The masks 0.5 and 2.5 cast to 0 and 2: no GPU_IDLE bit (halves away: 1 and 3, idle)."""
    readings = []
    for uuid, last in (("GPU-half", 2 * NS + 1), ("GPU-odd", 2 * NS + 3)):
        for i, offset in enumerate((0, NS, last, 60 * NS, 61 * NS, 62 * NS)):
            mask = 0.5 if i % 2 else 2.5
            readings.append(_gpu(uuid, NOON + offset, clocks_event_reasons=mask, power_watts=1.0))
    win = _window(readings)
    for step_s in (60.0, 30.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        got = recent_intervals(win, step_s)
        _same(got, want)
        # exact, not within rounding: the cap decides a nanosecond
        assert got.column("covered_s").to_pylist() == want.column("covered_s").to_pylist()
        assert got.column("no_data_s").to_pylist() == want.column("no_data_s").to_pylist()
    frame = recent_intervals(win, 60.0)
    # the first minute: 2e9 + 1 ns between its readings, then its tail capped at the cap
    assert _row(frame, "GPU-half", NOON)["covered_s"] == (2 * NS + 1 + 2 * NS) / 1e9
    assert _row(frame, "GPU-odd", NOON)["covered_s"] == (2 * NS + 3 + 2 * NS + 2) / 1e9
    assert {r["clock_idle"] for r in frame.to_pylist()} == {0.0}


def test_a_window_across_utc_midnight() -> None:
    """The sampling interval is the median spacing per UTC day: 2 s before midnight and 5 s
    after, so the caps are 4 s and 10 s (one median over both days would be 3.5 s, a 7 s cap).
    A 6 s gap before midnight leaves 2 s without data, a 15 s gap after it 5 s."""
    before = [t for t in range(-180, 0, 2) if t not in (-62, -60)]  # 23:58:56 → 23:59:02
    after = [t for t in range(0, 180, 5) if t not in (60, 65)]  # 00:00:55 → 00:01:10
    readings = [
        _gpu("GPU-mid", MIDNIGHT + t * NS, gpu_util_ratio=0.5, power_watts=100.0)
        for t in before + after
    ]
    labels = {"gpu_uuid": "GPU-mid", "pid": "7"}
    value = {"process_memory_used_bytes": 1e9}
    readings.append(Reading(Kind.PROCESS, MIDNIGHT - 30 * NS, labels, value))
    win = _window(readings)
    for step_s in (60.0, 30.0, 10.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        _same(recent_intervals(win, step_s), want)
        assert math.isclose(sum(want.column("no_data_s").to_pylist()), 7.0)
        span = (MIDNIGHT - 120 * NS, MIDNIGHT + 120 * NS)
        _same(recent_intervals(win, step_s, *span), gpu_intervals(win, step_s, *span,
                                                                  use_cache=False))  # fmt: skip


def test_gpu_readings_without_a_host_or_a_uuid() -> None:
    """A GPU reading may lack the host or the gpu_uuid label (null in the table): its rows sort
    after the others, it joins no host context (no host) or no process (no uuid)."""
    readings = []
    for s in range(0, 180, 5):
        ts = NOON + s * NS
        for labels in (
            {"host": "node-a", "gpu_uuid": "GPU-a", "gpu_index": "0"},
            {"gpu_uuid": "GPU-nohost", "gpu_index": "1"},
            {"host": "node-a", "gpu_index": "2"},
            {"gpu_index": "3"},
        ):
            readings.append(Reading(Kind.GPU, ts, labels, {"gpu_util_ratio": s / 180}))
        for uuid in ("GPU-a", "GPU-nohost"):
            labels = {"gpu_uuid": uuid, "pid": "42", "job_id": "job-x"}
            readings.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": 1e9}))
        readings.append(Reading(Kind.HOST, ts, {"host": "node-a"}, {"host_cpu_util_ratio": 0.25}))
    win = _window(readings)
    for step_s in (60.0, 20.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        _same(recent_intervals(win, step_s), want)
        rows = want.to_pylist()
        assert {(r["host"], r["gpu_uuid"]) for r in rows} == {
            ("node-a", "GPU-a"), ("node-a", None), (None, "GPU-nohost"), (None, None)
        }  # fmt: skip
        assert all((r["pid"] == "42") == (r["gpu_uuid"] is not None) for r in rows)
        assert all((r["host_cpu"] is not None) == (r["host"] is not None) for r in rows)


# pids that tie on peak memory, per minute, and the one the frame attributes the minute to: the
# lowest pid as DuckDB reads a BIGINT from it (0 where it reads none), then the lowest string
PID_TIES: tuple[tuple[tuple[str | None, ...], str | None], ...] = (
    (("abc", "", "12a"), ""),  # all read as 0: the lowest string
    (("abc", "7"), "abc"),  # 0 < 7
    ((" 12 ", "12.0", "13"), " 12 "),  # both 12: " " sorts before "1"
    (("1e3", "1_000", "999"), "999"),
    (("1e3", "1_000", "0x3E8"), "0x3E8"),  # all 1000
    (("-5", "abc"), "-5"),
    ((None, "abc"), "abc"),  # no pid: after every pid of the same number
    ((None, "1"), None),
)


def test_equal_memory_ties_between_pids_that_are_not_plain_numbers() -> None:
    readings = []
    for minute, (pids, _) in enumerate(PID_TIES):
        for s in range(0, 60, 10):
            ts = NOON + (minute * 60 + s) * NS
            readings.append(_gpu("GPU-a", ts, gpu_util_ratio=0.5))
            for pid in pids:
                labels = {"gpu_uuid": "GPU-a", "user": f"u-{pid}"}
                if pid is not None:
                    labels["pid"] = pid
                value = {"process_memory_used_bytes": 2e9}
                readings.append(Reading(Kind.PROCESS, ts, labels, value))
    win = _window(readings)
    want = gpu_intervals(win, 60.0, use_cache=False)
    got = recent_intervals(win, 60.0)
    _same(got, want)
    assert got.column("pid").to_pylist() == [top for _, top in PID_TIES]
    assert got.column("processes").to_pylist() == [len(pids) for pids, _ in PID_TIES]


TRY_CAST_FORMS = (
    "12", " 12 ", "\t12\n", "1e3", "1E3", "1e+3", "1_000", "12.0", "12.5", "-12.5", "12.49",
    "abc", "", "12a", "+5", "-5", ".5", "5.", ".", "-.5", "1.e3", "1e", "e3", "1e3.0", "1__000",
    "_1", "1_", "1_000.5", "1.5_5", "1._5", "0x10", "0X1_0", "0xg", "0x", "-0x10",
    " 0x10", "0x10 ", " +0x10",
    "0b101", "0b102", "0x7fffffffffffffff", "0x8000000000000000", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "9223372036854775807.4", "9223372036854775807.5", "-9223372036854775808.5",
    "92233720368547758070e-1", "149e-2", "25e-1", "-25e-1", "2.45e0", "0.45e1", "123.456e1",
    "1e-1", "5e-1", "1e18", "9.3e18", "1e400", "1e-400", "0e999", "1e32767", "0e32768",
    "5e-32768", "1e1_0", "1e 3", "1 e3", "+ 12", "--12", "12 3", "１２", "12\xa0", "1,000",
    "0.9223372036854775808e19", "0.92233720368547758079e19", "-0.92233720368547758085e19",
    "0.00000000000000000005e20", "0.99999999999999999999e1",
)  # fmt: skip


def test_pids_are_read_as_duckdb_reads_a_bigint() -> None:
    con = duckdb.connect()
    for text in TRY_CAST_FORMS:
        want = con.execute("SELECT TRY_CAST(? AS BIGINT)", [text]).fetchone()
        assert want is not None
        assert _try_cast_bigint(text) == want[0], text


def test_infinite_readings_give_what_the_sql_gives() -> None:
    """±inf reaches the window (segments turn only NaN into null): infinite means and sums, and
    NaN, not null, where the SQL computes inf - inf or inf × 0."""
    inf = math.inf
    readings = []
    for s in range(0, 120, 5):
        ts = NOON + s * NS
        sign = 1 if s % 10 else -1
        values = {"gpu_util_ratio": sign * inf, "power_watts": inf, "energy_joules": inf,
                  "nvlink_rx_bytes_per_second": inf, "nvlink_tx_bytes_per_second": -inf,
                  "memory_used_bytes": inf, "clocks_event_reasons": -(2.0**63)}  # fmt: skip
        readings.append(_gpu("GPU-inf", ts, **values))
        readings.append(_gpu("GPU-fine", ts, gpu_util_ratio=0.5, nvlink_rx_bytes_per_second=inf))
        for pid, mem in (("1", inf), ("2", -inf)):
            labels = {"gpu_uuid": "GPU-inf", "pid": pid, "job_id": "job-i"}
            readings.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": mem}))
        per_gpu = {"job_id": "job-i", "gpu_uuid": "GPU-inf"}
        readings.append(Reading(Kind.APP, ts, per_gpu, {"app_tokens_per_second": sign * inf}))
        readings.append(Reading(Kind.APP, ts, {"job_id": "job-i"}, {"app_tokens_per_second": 1.0}))
    readings.append(_gpu("GPU-lone", NOON, power_watts=inf))  # covers 0 s: inf × 0
    win = _window(readings)
    for step_s in (60.0, 10.0):
        want = gpu_intervals(win, step_s, use_cache=False)
        _same(recent_intervals(win, step_s), want)
    rows = recent_intervals(win, 60.0).to_pylist()
    inf_rows = [r for r in rows if r["gpu_uuid"] == "GPU-inf"]
    for column in ("duty", "energy_j", "nvlink_bps", "process_memory_bytes", "tokens_per_s"):
        assert all(math.isnan(r[column]) for r in inf_rows), column
    assert all(r["power_w"] == inf and r["pid"] == "1" for r in inf_rows)
    assert all(r["nvlink_bps"] == inf for r in rows if r["gpu_uuid"] == "GPU-fine")
    (lone,) = [r for r in rows if r["gpu_uuid"] == "GPU-lone"]
    assert lone["covered_s"] == 0.0 and math.isnan(lone["energy_power_j"])


@pytest.mark.parametrize("mask", [math.inf, -math.inf, 2.0**63])
def test_a_mask_outside_bigint_raises_as_the_sql_does(mask: float) -> None:
    readings = [_gpu("GPU-a", NOON + s * NS, clocks_event_reasons=0.0) for s in range(0, 60, 5)]
    readings.append(_gpu("GPU-a", NOON + 61 * NS, clocks_event_reasons=mask))
    win = _window(readings)
    with pytest.raises(QueryError, match="out of range"):
        gpu_intervals(win, 60.0, use_cache=False)
    with pytest.raises(ValueError, match=r"clocks_event_reasons value .* out of range"):
        recent_intervals(win, 60.0)
    # outside the span, the reading is not cast
    _same(recent_intervals(win, 60.0, NOON, NOON + 60 * NS),
          gpu_intervals(win, 60.0, NOON, NOON + 60 * NS, use_cache=False))  # fmt: skip


class _TickDuringRead(RecentWindow):
    """A window that takes one more tick right after the first read of its tables returns
    (as the collector's thread may, between two reads)."""

    late: list[Reading]

    def table(self, *args: object, **kwargs: object) -> pa.Table:
        out = super().table(*args, **kwargs)  # type: ignore[arg-type]
        self._tick()
        return out

    def tables(self, *args: object, **kwargs: object) -> dict[Kind, pa.Table]:
        out = super().tables(*args, **kwargs)  # type: ignore[arg-type]
        self._tick()
        return out

    def _tick(self) -> None:
        if self.late:
            late, self.late = self.late, []
            assert self.latest_ns is not None
            self.append(self.latest_ns + NS, late)


def test_every_kind_is_read_as_of_the_same_tick() -> None:
    """A tick appended while the frame is computed is in every table or in none: the process,
    host and app rows agree with the GPU rows."""
    readings = []
    for s in range(0, 30):
        ts = NOON + s * NS
        readings.append(_gpu("GPU-a", ts, gpu_util_ratio=0.5))
        labels = {"gpu_uuid": "GPU-a", "pid": "1", "job_id": "job-a"}
        readings.append(Reading(Kind.PROCESS, ts, labels, {"process_memory_used_bytes": 1e9}))
    win = _TickDuringRead(keep_s=3600)
    win.late = []
    for r in readings:
        win.append(r.ts, [r])
    want = gpu_intervals(win, 60.0, use_cache=False)
    late_labels = {"gpu_uuid": "GPU-a", "pid": "2", "job_id": "job-late"}
    win.late = [
        _gpu("GPU-a", NOON + 30 * NS, gpu_util_ratio=0.5),
        Reading(Kind.PROCESS, NOON + 30 * NS, late_labels, {"process_memory_used_bytes": 9e9}),
    ]
    got = recent_intervals(win, 60.0)
    assert not win.late  # the tick came in during the read
    _same(got, want)
    assert got.column("pid").to_pylist() == ["1"]
