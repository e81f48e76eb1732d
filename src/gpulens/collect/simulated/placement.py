"""Which job runs on which GPUs. The fleet never grows: it is exactly hosts × gpus_per_host.

- A named list of scenarios: one job each, multi-GPU jobs on one host (shrunk to the host's
  size, never below their minimum); ValueError when they do not fit.
- A single named scenario fills the fleet with as many jobs as fit.
- No list (the default mix): all nine at their preferred sizes when the fleet holds them (16
  GPUs: 4-GPU healthy DDP, 4-GPU straggler DDP, seven single-GPU jobs and one unallocated GPU).
  A smaller fleet shrinks the DDP jobs to 2 GPUs and keeps scenarios in `PRIORITY` order while
  they fit; the rest are reported as unplaced. The default 2 × 4 fleet runs healthy (2 GPUs),
  straggler (2), input-bound, eager, idle-allocated and tensorrt; throttled, fp32 and leak
  need a bigger fleet (three hosts of four run all nine).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.collect.simulated.scenarios import BUILDERS, SCENARIOS

PRIORITY: tuple[str, ...] = (
    "healthy_training",
    "straggler_ddp",
    "input_bound_training",
    "eager_inference",
    "idle_allocated",
    "tensorrt_inference",
    "throttled",
    "fp32_training",
    "memory_leak",
)

Placement = list[tuple[str, int, list[int]]]  # (scenario, host index, GPU indices)


def _pack(sizes: Sequence[tuple[str, int]], hosts: int, per_host: int) -> Placement | None:
    """First-fit decreasing onto the hosts; None when the jobs do not fit."""
    free = [list(range(per_host)) for _ in range(hosts)]
    out: Placement = []
    for name, size in sorted(sizes, key=lambda s: -s[1]):
        host = next((h for h, f in enumerate(free) if len(f) >= size), None)
        if host is None:
            return None
        gpus, free[host] = free[host][:size], free[host][size:]
        out.append((name, host, gpus))
    return out


def _size(name: str, per_host: int) -> int:
    _, preferred, minimum = BUILDERS[name]
    if per_host < minimum:
        raise ValueError(
            f"scenario {name!r} needs at least {minimum} GPUs on one host; "
            f"gpus_per_host is {per_host}"
        )
    return min(preferred, per_host)


def plan(scenarios: Sequence[str] | None, hosts: int, per_host: int) -> tuple[Placement, list[str]]:
    """(placement, scenarios of the default mix left out for lack of GPUs)."""
    if scenarios is None:
        return _default_mix(hosts, per_host)
    names = list(scenarios)
    if len(names) == 1:
        size = _size(names[0], per_host)
        count = (per_host // size) * hosts
        placed = _pack([(names[0], size)] * count, hosts, per_host)
        assert placed is not None
        return placed, []
    sizes = [(name, _size(name, per_host)) for name in names]
    placed = _pack(sizes, hosts, per_host)
    if placed is None:
        need = sum(s for _, s in sizes)
        raise ValueError(
            f"scenarios {names} need {need} GPUs ({', '.join(f'{n}: {s}' for n, s in sizes)}) "
            f"but the fleet has {hosts} hosts x {per_host} GPUs: pass more hosts"
        )
    return placed, []


def _default_mix(hosts: int, per_host: int) -> tuple[Placement, list[str]]:
    preferred = [
        (name, min(BUILDERS[name][1], per_host))
        for name in SCENARIOS
        if per_host >= BUILDERS[name][2]
    ]
    placed = _pack(preferred, hosts, per_host)
    if placed is None:
        chosen: list[tuple[str, int]] = []
        for name in PRIORITY:
            minimum = BUILDERS[name][2]
            if minimum <= per_host and _pack([*chosen, (name, minimum)], hosts, per_host):
                chosen.append((name, minimum))
        placed = _pack(chosen, hosts, per_host)
        assert placed is not None
    kept = {name for name, _, _ in placed}
    return placed, [name for name in SCENARIOS if name not in kept]
