"""A queue's GPU quota, as the scheduler readers give it and the quota analysis reads it.

Kueue ClusterQueue (nominal quota, borrowing limit, cohort, preemption), Volcano Queue
(guarantee or deserved, capability, weight, reclaimable, hierarchy), KAI-Scheduler Queue
(quota, limit, over-quota weight, parent queue) and a TOML table all become `QueueQuota`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """`gpus`: the GPUs the queue is promised (nominal quota, guarantee, deserved); `limit`:
    the most it may hold, borrowing included (NaN: no limit); `weight`: its share of what is
    left over; `parent`: its cohort or parent queue; `preemption`: the policy as written;
    `source`: where it was read (file and kind)."""

    name: str
    gpus: float
    limit: float = float("nan")
    weight: float = float("nan")
    parent: str = ""
    preemption: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class Quotas:
    """The queues' quotas, and aliases (a Kueue LocalQueue or namespace → its ClusterQueue)."""

    queues: dict[str, QueueQuota] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    cohorts: dict[str, str] = field(default_factory=dict)  # cohort → its parent cohort

    def of(self, queue: str) -> QueueQuota | None:
        """The quota of a queue name as a source spells it (directly or through an alias)."""
        return self.queues.get(queue) or self.queues.get(self.aliases.get(queue, ""))
