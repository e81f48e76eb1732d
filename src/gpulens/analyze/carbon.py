"""Carbon: kg CO2e of GPU energy from a static table of grid carbon intensity by region.

`co2e_kg(kwh, region, pue) = kwh × pue × g_per_kwh(region) / 1000`. The table ships with the
package (`gpulens/data/carbon_intensity.toml`: world average, countries, cloud regions, each
with its source and year); there are no network lookups. Region names are case-insensitive:
"world" (the default, 475 g/kWh), ISO country codes ("fr", "us"), and cloud regions
("gcp:us-central1", "aws:us-east-1", "azure:westeurope"). `regions()` lists them all.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

DEFAULT_REGION = "world"
_DATA_FILE = "carbon_intensity.toml"


@dataclass(frozen=True, slots=True)
class GridIntensity:
    """One region's annual average grid carbon intensity and where the number comes from."""

    region: str
    name: str
    g_per_kwh: float
    source: str
    year: int
    alias_of: str | None = None


@cache
def regions() -> Mapping[str, GridIntensity]:
    """Every known region (lower-case key → GridIntensity), aliases resolved."""
    raw = tomllib.loads(
        resources.files("gpulens").joinpath("data", _DATA_FILE).read_text(encoding="utf-8")
    )
    table: dict[str, dict[str, object]] = raw["regions"]
    out: dict[str, GridIntensity] = {}
    for key, entry in table.items():
        if "alias_of" in entry:
            continue
        out[key.lower()] = GridIntensity(
            region=key.lower(),
            name=str(entry["name"]),
            g_per_kwh=float(entry["g_per_kwh"]),  # type: ignore[arg-type]
            source=str(entry["source"]),
            year=int(entry["year"]),  # type: ignore[call-overload]
        )
    for key, entry in table.items():
        target = str(entry.get("alias_of", "")).lower()
        if not target:
            continue
        base = out[target]  # a dangling alias is a packaging bug, caught by the tests
        out[key.lower()] = GridIntensity(
            region=key.lower(),
            name=str(entry["name"]),
            g_per_kwh=base.g_per_kwh,
            source=base.source,
            year=base.year,
            alias_of=target,
        )
    return MappingProxyType(dict(sorted(out.items())))


class UnknownRegionError(ValueError):
    """A carbon region name that is not in the shipped table."""


def intensity(region: str = DEFAULT_REGION) -> GridIntensity:
    """The grid intensity of `region` (case-insensitive); UnknownRegionError names the fix."""
    key = region.strip().lower()
    table = regions()
    if key in table:
        return table[key]
    close = sorted(k for k in table if key and (key in k or k.split(":")[-1] == key))
    hint = f" Did you mean {', '.join(repr(c) for c in close[:5])}?" if close else ""
    countries = ", ".join(k for k in table if ":" not in k)
    raise UnknownRegionError(
        f"unknown carbon region {region!r}.{hint} Known regions: {countries}, and cloud "
        "regions written 'gcp:<region>', 'aws:<region>' or 'azure:<region>' (list them all "
        "with gpulens.analyze.carbon.regions(), or see docs/analysis/waste-and-fairness.md); "
        "or give your grid's intensity in gCO2e/kWh directly."
    )


def g_per_kwh(region: str | float = DEFAULT_REGION) -> float:
    """gCO2e per kWh: a region name from the table, or a number given directly."""
    if isinstance(region, int | float):
        if not region >= 0:
            raise ValueError(f"carbon intensity {region!r} gCO2e/kWh: expected a number >= 0")
        return float(region)
    return intensity(region).g_per_kwh


def co2e_kg(kwh: float, region: str | float = DEFAULT_REGION, pue: float = 1.0) -> float:
    """kg CO2e of `kwh` of GPU energy on `region`'s grid with facility overhead `pue` (≥ 1)."""
    if not pue >= 1.0:
        raise ValueError(f"PUE {pue!r}: expected a number >= 1.0 (1.0 = no facility overhead)")
    return kwh * pue * g_per_kwh(region) / 1000.0
