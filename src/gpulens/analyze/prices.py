"""Prices: what a GPU-hour and a kilowatt-hour cost, and the facility overhead (PUE).

The default GPU-hour prices are *indicative*: rounded on-demand list prices of one GPU on a
large public cloud in 2025 (instance price divided by its GPU count, US regions; e.g. AWS
g4dn.xlarge for T4, g5 for A10G, g6 for L4, g6e for L40S, p3 for V100, p4d/p4de for A100,
p5 for H100, p5en for H200, p6-b200 for B200). Real prices differ by provider, region,
commitment (reserved, spot) and date by a factor of two or more, and an on-premises GPU-hour is
its amortised purchase, hosting and staff cost. Configure them (`cost.gpu_hour_prices`).

Electricity: a cloud GPU-hour price already includes the electricity, so the default
`electricity_per_kwh` is 0 and `energy_cost` stays 0. On premises, set the GPU-hour prices to
the amortised hardware cost and `electricity_per_kwh` to the tariff: `total_cost` is then
`cost + energy_cost`, where `energy_cost = kWh × PUE × electricity_per_kwh`.

Model names are matched on tokens, so "NVIDIA H100 80GB HBM3", "Tesla T4",
"NVIDIA A100-SXM4-80GB" and "NVIDIA A100 80GB PCIe" all find their entry; the most specific
matching key wins ("A100 80GB" over "A100"); "L4" never matches "L40S" and "H200" never
matches "GH200".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpulens.numbers import is_nan

# USD per GPU-hour, indicative (see the module docstring); keys are matched by tokens.
DEFAULT_GPU_HOUR_PRICES: Mapping[str, float] = MappingProxyType(
    {
        "B200": 14.24,
        "H200": 7.91,
        "H100": 6.88,
        "A100 80GB": 3.43,
        "A100 40GB": 2.74,
        "A100": 2.74,
        "L40S": 1.86,
        "L4": 0.80,
        "A10G": 1.01,
        "V100": 3.06,
        "T4": 0.53,
    }
)
DEFAULT_UNKNOWN_GPU_HOUR_PRICE = 2.00
DEFAULT_CURRENCY = "USD"
DEFAULT_ELECTRICITY_PER_KWH = 0.0  # included in cloud GPU-hour prices
DEFAULT_PUE = 1.2  # hyperscale data centres report ~1.1-1.2; the industry mean is ~1.5

_NOISE = frozenset({"NVIDIA", "TESLA", "GEFORCE", "RTX", "QUADRO"})
_MEMORY = re.compile(r"^(\d+)G(?:B)?$")
_MIG_PROFILE = re.compile(r"(?<![0-9A-Za-z])(\d+)g\.(\d+)gb", re.IGNORECASE)


def model_tokens(name: str) -> frozenset[str]:
    """Upper-case tokens of a GPU model name, vendor words dropped and sizes as "<n>GB".

    >>> sorted(model_tokens("NVIDIA A100-SXM4-80GB"))
    ['80GB', 'A100', 'SXM4']
    """
    out: set[str] = set()
    for raw in re.split(r"[^0-9A-Za-z]+", name.upper()):
        if not raw or raw in _NOISE:
            continue
        m = _MEMORY.match(raw)
        out.add(f"{m.group(1)}GB" if m else raw)
    return frozenset(out)


def mig_slices(text: str | None) -> int | None:
    """Compute slices of a MIG profile named in `text` ("1g.10gb" → 1), None when absent."""
    if not text:
        return None
    m = _MIG_PROFILE.search(text)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class Prices:
    """Price per GPU-hour by model, a default for unknown models, currency, electricity, PUE.

    Build it with `Prices.from_settings(...)` (plain mappings, as config provides them) or
    directly. All money is in `currency`; `pue` ≥ 1 scales GPU energy to facility energy.
    """

    gpu_hour: Mapping[str, float] = field(default_factory=lambda: DEFAULT_GPU_HOUR_PRICES)
    unknown_gpu_hour: float = DEFAULT_UNKNOWN_GPU_HOUR_PRICE
    currency: str = DEFAULT_CURRENCY
    electricity_per_kwh: float = DEFAULT_ELECTRICITY_PER_KWH
    pue: float = DEFAULT_PUE
    _keys: tuple[tuple[frozenset[str], str, float], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        for key, price in self.gpu_hour.items():
            _check_number(f"GPU-hour price of {key!r}", price, 0.0)
        _check_number("unknown-model GPU-hour price", self.unknown_gpu_hour, 0.0)
        _check_number("electricity price per kWh", self.electricity_per_kwh, 0.0)
        _check_number("PUE", self.pue, 1.0, 5.0)
        if not self.currency.strip():
            raise ValueError("currency is empty: give a code such as 'USD' or 'EUR'")
        keys = []
        for key, price in self.gpu_hour.items():
            tokens = model_tokens(key)
            if not tokens:
                raise ValueError(f"GPU-hour price key {key!r} names no model: use e.g. 'H100'")
            keys.append((tokens, key, float(price)))
        # most specific first (more tokens, then longer key), then by name for determinism
        keys.sort(key=lambda k: (-len(k[0]), -len(k[1]), k[1]))
        object.__setattr__(self, "_keys", tuple(keys))
        object.__setattr__(self, "gpu_hour", MappingProxyType(dict(self.gpu_hour)))

    @classmethod
    def from_settings(
        cls,
        gpu_hour_prices: Mapping[str, float] | Sequence[str] | None = None,
        *,
        replace_defaults: bool = False,
        unknown_gpu_hour: float = DEFAULT_UNKNOWN_GPU_HOUR_PRICE,
        currency: str = DEFAULT_CURRENCY,
        electricity_per_kwh: float = DEFAULT_ELECTRICITY_PER_KWH,
        pue: float = DEFAULT_PUE,
    ) -> Prices:
        """Prices from plain settings. `gpu_hour_prices` is a mapping model → price or a list
        of "MODEL=PRICE" strings; its entries override (or, with `replace_defaults`, replace)
        the default table."""
        given = (
            parse_assignments(gpu_hour_prices, what="GPU-hour price")
            if gpu_hour_prices is not None and not isinstance(gpu_hour_prices, Mapping)
            else dict(gpu_hour_prices or {})
        )
        table = {} if replace_defaults else dict(DEFAULT_GPU_HOUR_PRICES)
        table.update({k: float(v) for k, v in given.items()})
        return cls(
            gpu_hour=table,
            unknown_gpu_hour=float(unknown_gpu_hour),
            currency=currency,
            electricity_per_kwh=float(electricity_per_kwh),
            pue=float(pue),
        )

    def match(self, model: str | None) -> str | None:
        """The price-table key a GPU model name matches, or None (unknown model)."""
        if not model:
            return None
        for key in self.gpu_hour:
            if key.casefold() == model.casefold():
                return key
        tokens = model_tokens(model)
        for key_tokens, key, _price in self._keys:
            if key_tokens <= tokens:
                return key
        return None

    def gpu_hour_price(self, model: str | None) -> float:
        """Price of one GPU-hour of `model` (the unknown-model default when nothing matches)."""
        key = self.match(model)
        return self.unknown_gpu_hour if key is None else float(self.gpu_hour[key])

    def energy_cost(self, kwh: float) -> float:
        """Electricity cost of `kwh` of GPU energy, facility overhead (PUE) included."""
        return kwh * self.pue * self.electricity_per_kwh


def parse_assignments(items: Sequence[str], *, what: str = "value") -> dict[str, float]:
    """["H100=2.5", "team-a=0.4"] → {"H100": 2.5, "team-a": 0.4}; errors quote the item."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = str(item).rpartition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{what} {item!r} is not NAME=NUMBER (e.g. 'H100=2.5')")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{what} {item!r}: {value.strip()!r} is not a number") from None
        out[name] = number
    return out


def _check_number(what: str, value: float, low: float, high: float | None = None) -> None:
    if not isinstance(value, int | float) or is_nan(value):
        raise ValueError(f"{what} is {value!r}: expected a number")
    if value < low or (high is not None and value > high):
        limit = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{what} is {value!r}: expected a number {limit}")
