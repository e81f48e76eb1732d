"""Deterministic noise: a value keyed by (seed, entity, time bucket), never by call order.

A splitmix64 hash turns the key into a float, so asking for the same bucket twice, or in any
order, gives the same answer; nothing is drawn from a stateful generator.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def mix(value: int) -> int:
    """splitmix64 finaliser: a well-spread 64-bit hash of `value`."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def key(*parts: int) -> int:
    """A 64-bit key combining `parts` (seed, host index, GPU index...)."""
    acc = 0x51ED270B27F3A1E5
    for part in parts:
        acc = mix(acc ^ (part & _MASK))
    return acc


def uniform(entity: int, bucket: int, stream: int = 0) -> float:
    """A float in [-1, 1) fixed by (entity key, time bucket, stream)."""
    h = mix(entity ^ mix((bucket & _MASK) ^ (stream * 0x632BE59BD9B4E019 & _MASK)))
    return (h >> 11) * (2.0 / (1 << 53)) - 1.0
