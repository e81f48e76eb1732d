"""The coverage rule, once for every source: how much time a GPU's readings stand for.

Each reading covers the time until the next reading of the same GPU entity, capped at a
maximum gap; beyond the cap the time has no data (counted apart, never as zero activity). The
cap is `max_gap_s` when given, else twice the GPU's sampling interval, the median spacing of
its readings over the UTC day. The last reading of a series covers one sampling interval (it
stands for the period the sampler was about to measure); a reading with no sampling interval
(a lone snapshot: one reading of the GPU in the day) covers no time at all.

The rule is applied to fine buckets (60 s in the frames cache; in the raw path the largest
divisor of both the step and 60 s), from per-bucket aggregates only (no window over raw rows):
the count `samples`, the first and last reading time `ts_first` / `ts_last`, and the next
bucket's first reading. Per fine bucket:

- spacing estimate: the mean spacing inside the bucket `(ts_last - ts_first) / (samples - 1)`
  when it holds two distinct times, else the gap to the next bucket's first reading; the GPU's
  sampling interval `spacing_ns` is the median of these over its buckets of the UTC day;
- inside the bucket: `min(ts_last - ts_first, (samples - 1) × cap)` is covered and the rest is
  no data (exact when no gap inside a bucket exceeds the cap, an upper bound of the coverage
  otherwise);
- from the last reading to the next bucket's first reading of the same day: covered up to the
  cap, the rest no data;
- the day's last reading leaves its tail open (`tail_from`): the frame resolves it against the
  next interval's first reading, or covers one sampling interval when there is none.

`cov_s` and `nod_s` are seconds and add up across buckets, so coarser cache levels and report
steps sum them.
"""

from __future__ import annotations

NS_PER_DAY = 86_400 * 1_000_000_000
#: columns the rule adds per fine bucket (seconds covered, seconds without data, the open
#: tail's reading time, the cap and the sampling interval in ns)
COVERAGE_COLUMNS: tuple[str, ...] = ("cov_s", "nod_s", "tail_from", "cap_ns", "spacing_ns")


def coverage_sql(
    source: str, keys: tuple[str, ...], max_gap_ns: str = "NULL", bucket: str = "0"
) -> str:
    """SELECT over `source` (one row per GPU entity `keys` and fine bucket `fb`, with `samples`,
    `ts_first`, `ts_last`) adding `COVERAGE_COLUMNS`. `max_gap_ns` is an SQL expression: the
    configured cap in ns, or NULL for twice the sampling interval. Tails stay open at the end
    of each `bucket` (an expression of `fb`: the interval a fine bucket belongs to), so that
    the frame resolves them against whatever follows, raw rows or cached ones."""
    part = ", ".join(keys)
    return f"""
  SELECT * EXCLUDE (nxt, nxt_day, est, day_),
    CASE WHEN nxt IS NULL THEN ts_last END AS tail_from,
    (least(ts_last - ts_first, (samples - 1) * coalesce(cap_ns, 0))
      + CASE WHEN nxt IS NULL THEN 0 ELSE least(nxt - ts_last, coalesce(cap_ns, 0)) END
    ) / 1e9 AS cov_s,
    (greatest(ts_last - ts_first - (samples - 1) * coalesce(cap_ns, 0), 0)
      + CASE WHEN nxt IS NULL THEN 0 ELSE greatest(nxt - ts_last - coalesce(cap_ns, 0), 0) END
    ) / 1e9 AS nod_s
  FROM (
    SELECT *, coalesce({max_gap_ns}, 2 * spacing_ns)::BIGINT AS cap_ns
    FROM (
      SELECT *, median(est) OVER (PARTITION BY {part}, day_) AS spacing_ns
      FROM (
        SELECT *,
          CASE WHEN samples > 1 AND ts_last > ts_first
            THEN (ts_last - ts_first) / (samples - 1)
            ELSE nxt_day - ts_last END AS est
        FROM (
          SELECT *, ts_first // {NS_PER_DAY} AS day_,
            lead(ts_first) OVER (PARTITION BY {part}, ts_first // {NS_PER_DAY} ORDER BY fb)
              AS nxt_day,
            lead(ts_first) OVER (
              PARTITION BY {part}, ts_first // {NS_PER_DAY}, {bucket} ORDER BY fb
            ) AS nxt
          FROM {source}
        )
      )
    )
  )"""


def tail_sql() -> str:
    """Expressions resolving each interval's open tail (columns `tail_from`, `cap_ns`,
    `spacing_ns`, `ts_last`, and `next_first`: the next interval's first reading):
    (covered ns, no-data ns)."""
    covered = """CASE
      WHEN tail_from IS NULL THEN 0
      WHEN tail_from < ts_last THEN least(ts_last - tail_from, coalesce(cap_ns, 0))
      WHEN next_first IS NULL THEN least(coalesce(spacing_ns, 0), coalesce(cap_ns, 0))
      ELSE least(next_first - tail_from, coalesce(cap_ns, 0))
    END"""
    no_data = """CASE
      WHEN tail_from IS NULL OR tail_from < ts_last OR next_first IS NULL THEN 0
      ELSE greatest(next_first - tail_from - coalesce(cap_ns, 0), 0)
    END"""
    return f"{covered} AS tail_cov_ns, {no_data} AS tail_nod_ns"


def close_inner_tails(source: str, keys: tuple[str, ...], k: str) -> str:
    """SELECT over `source` (fine buckets `fb` with the coverage columns, `k` of them to an
    interval) resolving the open tails that another fine bucket of the same interval follows
    (a day's end inside a longer interval): covered up to the cap until that bucket's first
    reading, the rest no data. Only each interval's last open tail stays open."""
    part = ", ".join(keys)
    return f"""
  SELECT * EXCLUDE (tail_from, cov_s, nod_s, nxt_in),
    CASE WHEN nxt_in IS NULL THEN tail_from END AS tail_from,
    cov_s + CASE WHEN tail_from IS NOT NULL AND nxt_in IS NOT NULL
      THEN least(nxt_in - tail_from, coalesce(cap_ns, 0)) / 1e9 ELSE 0 END AS cov_s,
    nod_s + CASE WHEN tail_from IS NOT NULL AND nxt_in IS NOT NULL
      THEN greatest(nxt_in - tail_from - coalesce(cap_ns, 0), 0) / 1e9 ELSE 0 END AS nod_s
  FROM (
    SELECT *, lead(ts_first) OVER (PARTITION BY {part}, fb // {k} ORDER BY fb) AS nxt_in
    FROM {source}
  )"""
