"""engine_migration from the serving process's own latencies alone (pure).

For a job served through gpulens.torch.inference on a native engine (eager) and on an optimised
one (torch.compile, TensorRT, ONNX Runtime) with the same model, the measured ratio of their
median latencies is the expected gain. The telemetry rule (rules/engine_migration.py) uses the
same measurement for jobs with GPU intervals; this is its counterpart for jobs without (a
service on a machine without the agent, or on the CPU). Same rule id, docs and fix.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from gpulens.analyze.engines import ADVICE
from gpulens.analyze.inference import measured_gain
from gpulens.findings.model import Evidence, Finding, Severity

RULE_ID = "engine_migration"
MIN_GAIN = 1.2  # a measured speed-up below this is not worth a migration finding


def latency_evidence(
    nat: dict[str, Any],
    opt: dict[str, Any],
    gain: float,
    basis: str,
    min_gain: float | None = None,
) -> list[Evidence]:
    """The evidence of a measured latency comparison (ms, calls after warm-up); `min_gain`:
    the gain's threshold when it is the finding's condition."""
    return [
        Evidence(
            "latency_p50_ms",
            float(nat["p50_ms"]),
            note=f"median latency on {nat['engine']} over {nat['calls']} calls after warm-up",
        ),
        Evidence(
            "latency_p50_ms_optimised",
            float(opt["p50_ms"]),
            note=f"median latency on {opt['engine']} over {opt['calls']} calls after warm-up",
        ),
        Evidence("expected_gain", gain, min_gain, ">=" if min_gain is not None else "", basis),
    ]


def measured_migration(
    rows: Sequence[dict[str, Any]],
    window: tuple[int, int],
    skip_jobs: Collection[str] = (),
    min_gain: float = MIN_GAIN,
) -> list[Finding]:
    """One finding per job (not in `skip_jobs`) whose model is measurably faster on an
    optimised engine than on eager (`analyze.inference.latency_by_engine` rows)."""
    out: list[Finding] = []
    for job in sorted({str(r["job_id"]) for r in rows} - set(skip_jobs)):
        measured = measured_gain(rows, [job])
        if measured is None or measured[0] < min_gain:
            continue
        gain, basis, engine, nat, opt = measured
        out.append(
            Finding(
                RULE_ID,
                Severity.WARNING if gain >= 2 else Severity.INFO,
                {"job_id": job, "model": str(nat["model"]), "source": "serving latency"},
                window,
                f"{nat['model']} on {nat['engine']}: {engine} answers {gain:.1f}x faster "
                f"(median {opt['p50_ms']:.3g} ms vs {nat['p50_ms']:.3g} ms, measured)",
                tuple(latency_evidence(nat, opt, gain, basis, min_gain)),
                recommendation=(
                    f"Serve this model on {engine}: the same model measured {gain:.1f}x "
                    f"faster there ({basis}). Otherwise: {ADVICE['pytorch']}."
                ),
                docs=f"docs/findings/{RULE_ID}.md",
            )
        )
    return out
