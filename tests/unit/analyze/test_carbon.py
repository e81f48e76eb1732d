"""Carbon: the shipped region table and the kg CO2e formula."""

from __future__ import annotations

import pytest

from gpulens.analyze import carbon


def test_table_is_complete_and_sourced() -> None:
    table = carbon.regions()
    assert len(table) >= 30
    for key, entry in table.items():
        assert key == key.lower()
        assert entry.source and 1990 <= entry.year <= 2030, key
        assert 0 <= entry.g_per_kwh <= 1200, key
    assert table["world"].g_per_kwh == 475
    countries = [k for k in table if ":" not in k]
    clouds = {k.split(":")[0] for k in table if ":" in k}
    assert len(countries) >= 15 and clouds == {"aws", "azure", "gcp"}


def test_aliases_take_their_grid() -> None:
    aws = carbon.intensity("aws:us-east-1")
    assert aws.alias_of == "gcp:us-east4"
    assert aws.g_per_kwh == carbon.intensity("gcp:us-east4").g_per_kwh


def test_names_are_case_insensitive() -> None:
    assert carbon.intensity("FR").g_per_kwh == carbon.intensity("fr").g_per_kwh


def test_co2e_formula() -> None:
    # 10 kWh × PUE 1.5 × 56 g/kWh (France) = 840 g
    assert carbon.co2e_kg(10.0, "fr", 1.5) == pytest.approx(0.840)
    assert carbon.co2e_kg(2.0) == pytest.approx(2.0 * 475 / 1000)
    assert carbon.co2e_kg(2.0, 100.0, 1.0) == pytest.approx(0.2)
    assert carbon.co2e_kg(0.0, "de") == 0.0


def test_unknown_region_says_how_to_find_names() -> None:
    with pytest.raises(carbon.UnknownRegionError) as info:
        carbon.intensity("us-east-1")
    text = str(info.value)
    assert "'us-east-1'" in text and "'aws:us-east-1'" in text and "regions()" in text
    with pytest.raises(ValueError, match="atlantis"):
        carbon.co2e_kg(1.0, "atlantis")


def test_bad_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match="PUE"):
        carbon.co2e_kg(1.0, "world", 0.5)
    with pytest.raises(ValueError, match=">= 0"):
        carbon.g_per_kwh(-1.0)


def test_every_region_is_documented() -> None:
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "analysis" / "waste-and-fairness.md"
    text = doc.read_text(encoding="utf-8")
    for key, entry in carbon.regions().items():
        assert f"| `{key}` | {entry.name} | {entry.g_per_kwh:g} |" in text, key
