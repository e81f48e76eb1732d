"""fragmented_capacity: pending jobs that fit in a queue's free GPUs, but on no single node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.findings.model import Evidence, Finding, Impact, Severity
from gpulens.findings.runs import docs

if TYPE_CHECKING:
    from gpulens.findings.fleet import FleetContext

RULE_ID = "fragmented_capacity"


def check(ctx: FleetContext) -> list[Finding]:
    """One finding per queue whose pending jobs are fragmented out."""
    s = ctx.summary
    window = (s.start_s * 1_000_000_000, s.end_s * 1_000_000_000) if s else (0, 0)
    out = []
    for f in ctx.fragmentation:
        if not f.fragmented_jobs:
            continue
        n = len(f.fragmented_jobs)
        out.append(
            Finding(
                rule_id=RULE_ID,
                severity=Severity.WARNING,
                subject={"queue": f.queue},
                window=window,
                summary=(
                    f"{n} pending job(s) of queue {f.queue} ask for {f.fragmented_gpus:.0f} "
                    f"GPUs; {f.free_gpus:.0f} GPUs are free, but at most "
                    f"{f.largest_free_block:.0f} on one node"
                ),
                evidence=(
                    Evidence("fragmented_gpus", f.fragmented_gpus, note="GPUs of those jobs"),
                    Evidence("free_gpus", f.free_gpus, note="GPUs, usable nodes"),
                    Evidence(
                        "largest_free_block",
                        f.largest_free_block,
                        min(f.fragmented_sizes),
                        "<",
                        note="GPUs free on one node; threshold: the smallest such job",
                    ),
                ),
                impact=Impact(),
                recommendation=(
                    "Pack small jobs onto fewer nodes (Slurm `SelectTypeParameters=CR_Pack_Nodes`"
                    " or `--exclusive` for the large ones, a Kubernetes bin-packing scoring "
                    "strategy such as MostAllocated), or drain a node for the waiting jobs."
                ),
                docs=docs(RULE_ID),
            )
        )
    return out
