"""``--map ROLE=COLUMN[:UNIT],...``: which CSV column plays which role (time, total, ...).

The same ``name=value`` pairs and unit names as ``ingest --format csv`` (collect/csv_import),
read the other way round: the left side is the role the fleet analysis knows, the right side
the file's column, so one option names a whole layout. Units scale a count (``percent``: a
column in % of one GPU, as the Alibaba PAI trace's ``plan_gpu``) or a time (``ms``, ``s``,
``iso``; ``auto`` by default).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from gpulens.collect.csv_import.mapping import TIME_UNITS, UNITS, normalize_unit
from gpulens.errors import ConfigError

SEQUENCE_ROLES: dict[str, str] = {
    "time": "the step's time (epoch s/ms/us/ns or ISO 8601)",
    "total": "GPUs in the queue",
    "in_use": "GPUs allocated to jobs",
    "pending": "GPUs asked for by pending jobs",
    "queue": "the queue's name (when one file holds several queues)",
}
JOB_ROLES: dict[str, str] = {
    "submit": "when the job was submitted",
    "start": "when it started (empty: never)",
    "end": "when it ended (empty: still running)",
    "gpus": "GPUs per instance (or in all)",
    "count": "instances (GPUs × count); optional",
    "queue": "queue, partition, virtual cluster or GPU type",
    "user": "who submitted it; optional",
    "team": "team, account or project; optional",
    "job": "job id; optional",
    "state": "job state; optional",
}
_TIME_ROLES = frozenset({"time", "submit", "start", "end"})


@dataclass(frozen=True, slots=True)
class RoleMap:
    """role → (column, unit or None)."""

    roles: dict[str, tuple[str, str | None]]

    def column(self, role: str) -> str | None:
        found = self.roles.get(role)
        return found[0] if found else None

    def unit(self, role: str) -> str | None:
        found = self.roles.get(role)
        return found[1] if found else None

    def factor(self, role: str) -> float:
        unit = self.unit(role)
        return 1.0 if unit is None else UNITS[unit][0]


def parse_role_map(specs: Iterable[str], known: dict[str, str], required: Iterable[str]) -> RoleMap:
    """A RoleMap from repeated ``--map`` values, each ``ROLE=COLUMN[:UNIT]`` pairs separated by
    commas (ConfigError names the first bad pair and the roles there are)."""
    roles: dict[str, tuple[str, str | None]] = {}
    listing = ", ".join(f"{k} ({v})" for k, v in known.items())
    for spec in specs:
        for pair in (p.strip() for p in spec.split(",")):
            if not pair:
                continue
            role, sep, target = pair.partition("=")
            role = role.strip()
            if not sep or not target.strip():
                raise ConfigError(f"--map {pair!r}: expected ROLE=COLUMN; the roles: {listing}")
            if role not in known:
                close = difflib.get_close_matches(role, list(known), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(f"--map {pair!r}: unknown role {role!r}{hint}; roles: {listing}")
            if role in roles:
                raise ConfigError(f"--map: role {role!r} is mapped twice; map it once")
            column, _, unit = target.strip().partition(":")
            roles[role] = (column.strip(), _unit(pair, role, unit))
    missing = [r for r in required if r not in roles]
    if missing:
        raise ConfigError(
            f"--map needs {', '.join(missing)}: pass --map "
            + ",".join(f"{r}=COLUMN" for r in missing)
            + f" (the roles: {listing})"
        )
    return RoleMap(roles)


def _unit(pair: str, role: str, unit: str) -> str | None:
    if not unit.strip():
        return None
    name = normalize_unit(unit)
    if role in _TIME_ROLES:
        if name not in TIME_UNITS:
            raise ConfigError(f"--map {pair!r}: a time unit is one of {', '.join(TIME_UNITS)}")
        return name
    if name not in ("percent", "ratio"):
        raise ConfigError(f"--map {pair!r}: a GPU count takes no unit but percent or ratio")
    return name
