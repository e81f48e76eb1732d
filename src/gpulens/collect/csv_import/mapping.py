"""Which CSV column means what: the timestamp, entity labels and catalog metrics.

A `ColumnMap` is declarative and validated once (ConfigError names the bad option): metric
fields must be catalog names, a unit conversion must lead to the metric's catalog unit, label
keys must be identifiers that do not clash with `ts` or a metric. The option syntax the CLI
accepts is parsed here too: ``--map COLUMN=FIELD[:UNIT]``, ``--label COLUMN=LABEL``,
``--set LABEL=VALUE``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import numpy as np

from gpulens.catalog import METRICS
from gpulens.errors import ConfigError
from gpulens.model import LABEL_KEYS, Kind
from gpulens.units import KIB, MIB

TIME_UNITS: tuple[str, ...] = ("auto", "s", "ms", "us", "ns", "iso")

GIB = 1024 * MIB
# unit name → (factor to the base unit, the catalog unit it converts to)
UNITS: dict[str, tuple[float, str]] = {
    "percent": (0.01, "ratio"),
    "ratio": (1.0, "ratio"),
    "bytes": (1.0, "bytes"),
    "kib": (float(KIB), "bytes"),
    "mib": (float(MIB), "bytes"),
    "gib": (float(GIB), "bytes"),
    "kb": (1e3, "bytes"),
    "mb": (1e6, "bytes"),
    "gb": (1e9, "bytes"),
    "kib/s": (float(KIB), "bytes/s"),
    "mib/s": (float(MIB), "bytes/s"),
    "gib/s": (float(GIB), "bytes/s"),
    "kb/s": (1e3, "bytes/s"),
    "mb/s": (1e6, "bytes/s"),
    "gb/s": (1e9, "bytes/s"),
    "mw": (1e-3, "W"),
    "w": (1.0, "W"),
    "kw": (1e3, "W"),
    "mj": (1e-3, "J"),
    "j": (1.0, "J"),
    "kj": (1e3, "J"),
    "wh": (3600.0, "J"),
    "kwh": (3.6e6, "J"),
    "ns": (1e-9, "s"),
    "us": (1e-6, "s"),
    "ms": (1e-3, "s"),
    "s": (1.0, "s"),
    "min": (60.0, "s"),
    "h": (3600.0, "s"),
    "hz": (1.0, "Hz"),
    "khz": (1e3, "Hz"),
    "mhz": (1e6, "Hz"),
    "ghz": (1e9, "Hz"),
    "c": (1.0, "°C"),
}
_ALIASES = {"%": "percent", "pct": "percent", "b": "bytes", "celsius": "c"}
_LABEL_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
_RESERVED = frozenset({"ts", "date"})


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """CSV `column` holds catalog metric `field`, in `unit` (None: already in base units)."""

    column: str
    field: str
    unit: str | None = None

    @property
    def factor(self) -> float:
        """What a value is multiplied by to reach the catalog's base unit."""
        return 1.0 if self.unit is None else UNITS[self.unit][0]

    def convert(self, values: np.ndarray) -> np.ndarray:
        """`values` in base units; a sub-unit factor divides by its exact inverse (0.575, not
        57.5 * 0.01 = 0.5750000000000001)."""
        factor = self.factor
        if factor == 1.0:
            return values
        inverse = round(1.0 / factor)
        if factor < 1.0 and abs(inverse * factor - 1.0) < 1e-12:
            return values / float(inverse)
        return values * factor

    @property
    def kind(self) -> Kind:
        return METRICS[self.field].kind


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """How one CSV layout maps to readings.

    `time_column` holds the timestamp in `time_unit` (``auto`` guesses s/ms/us/ns from the
    magnitude of numbers and takes text as ISO 8601; a naive ISO time is UTC). `labels` pairs
    (column, label key); one column may feed several labels. `metrics` are the value columns.
    `constants` are labels every row gets (such as ``source``). `fill_host`: rows without a
    ``host`` label get the importer's host name (off for traces that name no machine).
    """

    time_column: str
    metrics: tuple[MetricColumn, ...]
    labels: tuple[tuple[str, str], ...] = ()
    time_unit: str = "auto"
    constants: tuple[tuple[str, str], ...] = ()
    fill_host: bool = True
    delimiter: str = ","
    label_keys: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        _validate(self)
        keys = [key for _, key in self.labels] + [key for key, _ in self.constants]
        object.__setattr__(self, "label_keys", tuple(dict.fromkeys(keys)))

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The reading kinds the metrics belong to, in first-seen order."""
        return tuple(dict.fromkeys(m.kind for m in self.metrics))

    @property
    def columns(self) -> tuple[str, ...]:
        """Every CSV column the map reads."""
        cols = [self.time_column, *(c for c, _ in self.labels), *(m.column for m in self.metrics)]
        return tuple(dict.fromkeys(cols))


def _validate(m: ColumnMap) -> None:
    if not m.time_column:
        raise ConfigError("the CSV importer needs a timestamp column: pass --time-column NAME")
    if m.time_unit not in TIME_UNITS:
        raise ConfigError(f"--time-unit {m.time_unit!r} is not one of {', '.join(TIME_UNITS)}")
    if not m.metrics:
        raise ConfigError("the CSV importer needs at least one metric: pass --map COLUMN=FIELD")
    if len(m.delimiter) != 1:
        raise ConfigError(f"the CSV delimiter must be one character, got {m.delimiter!r}")
    seen: set[str] = set()
    for metric in m.metrics:
        _check_metric(metric)
        if metric.field in seen:
            raise ConfigError(f"metric {metric.field!r} is mapped from two columns; map it once")
        seen.add(metric.field)
    for key in [k for _, k in m.labels] + [k for k, _ in m.constants]:
        check_label_key(key)
    if len({k for _, k in m.labels} | {k for k, _ in m.constants}) != len(m.labels) + len(
        m.constants
    ):
        raise ConfigError("a label key is given twice in --label/--set; give each label once")


def _check_metric(metric: MetricColumn) -> None:
    known = METRICS.get(metric.field)
    if known is None:
        close = difflib.get_close_matches(metric.field, list(METRICS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(
            f"--map {metric.column}={metric.field}: {metric.field!r} is not a catalog metric"
            f"{hint}; docs/metrics.md lists them"
        )
    if known.kind is Kind.EVENT:
        raise ConfigError(f"--map: {metric.field!r} is an event, not a metric")
    if metric.unit is None:
        return
    if metric.unit not in UNITS:
        raise ConfigError(
            f"--map {metric.column}={metric.field}:{metric.unit}: unknown unit "
            f"{metric.unit!r}; use one of {', '.join(UNITS)}"
        )
    base = UNITS[metric.unit][1]
    if base != known.unit:
        raise ConfigError(
            f"--map {metric.column}={metric.field}:{metric.unit}: {metric.unit} converts to "
            f"{base}, but {metric.field} is in {known.unit}"
        )


def check_label_key(key: str) -> None:
    """ConfigError unless `key` can be a label column of the store."""
    if not _LABEL_RE.match(key) or key in _RESERVED or key in METRICS:
        known = ", ".join(LABEL_KEYS[:12])
        raise ConfigError(
            f"{key!r} cannot be a label: use a lower-case identifier that is not 'ts', 'date' "
            f"or a metric name (the usual ones: {known}, ...)"
        )


def normalize_unit(unit: str) -> str:
    """The canonical spelling of a unit name (``%`` → ``percent``, ``MiB`` → ``mib``)."""
    low = unit.strip().lower()
    return _ALIASES.get(low, low)


def _split(option: str, spec: str, what: str) -> tuple[str, str]:
    left, sep, right = spec.partition("=")
    if not sep or not left.strip() or not right.strip():
        raise ConfigError(f"{option} {spec!r}: expected {what}")
    return left.strip(), right.strip()


def parse_map_option(spec: str) -> MetricColumn:
    """``COLUMN=FIELD[:UNIT]`` → MetricColumn (the column name may contain '=' only quoted out)."""
    column, target = _split("--map", spec, "COLUMN=FIELD or COLUMN=FIELD:UNIT")
    name, _, unit = target.partition(":")
    metric = MetricColumn(column, name.strip(), normalize_unit(unit) if unit.strip() else None)
    _check_metric(metric)
    return metric


def parse_label_option(spec: str) -> tuple[str, str]:
    """``COLUMN=LABEL`` → (column, label key)."""
    column, key = _split("--label", spec, "COLUMN=LABEL, such as container_ip=pod")
    check_label_key(key)
    return column, key


def parse_set_option(spec: str) -> tuple[str, str]:
    """``LABEL=VALUE`` → (label key, value) for a label every row gets."""
    key, value = _split("--set", spec, "LABEL=VALUE, such as source=my-cluster")
    check_label_key(key)
    return key, value


def column_map_from_options(
    time_column: str,
    maps: list[str],
    labels: list[str] | None = None,
    sets: list[str] | None = None,
    time_unit: str = "auto",
    delimiter: str = ",",
) -> ColumnMap:
    """A ColumnMap from the CLI's repeated option strings (ConfigError on the first bad one)."""
    return ColumnMap(
        time_column=time_column,
        metrics=tuple(parse_map_option(s) for s in maps),
        labels=tuple(parse_label_option(s) for s in labels or []),
        time_unit=time_unit,
        constants=tuple(parse_set_option(s) for s in sets or []),
        delimiter=delimiter,
    )
