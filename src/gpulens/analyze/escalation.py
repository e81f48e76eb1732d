"""Idle escalation (pure): which holders of idle GPUs to warn, and which to act on.

Jobstats / Job Defense Shield's ladder on gpulens's states: a holder (a Slurm job, else a
Kubernetes pod, else one GPU) whose GPUs are all in the `idle_allocated` state is warned once
it has been idle `warn_s` (the idle finding's warning level) and acted on once it has been
idle `act_s` (its critical level), if and only if

- it is not exempt (user, QoS, partition or namespace);
- it was warned *during this same idle spell*, at least `act_s - warn_s` ago (the notice a
  person gets). A holder that worked after its warning starts a new spell: the old warning
  no longer counts, it is warned anew and acted on only after a new notice;
- the command can be built from its labels (`command_args`), and acting is enabled and this
  is not a dry run.

`idle_spells(frame)` reads the classified interval frame: per holder, the trailing run of
intervals in which every GPU row it has is idle, with no gap in the data (a gap is no data,
never idle: the spell restarts after it). `decide(spells, history, policy, now_ns)` applies
the ladder; `history(records)` folds the audit log's records. Commands are never run here.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpulens.errors import ConfigError

NS = 1_000_000_000
IDLE_STATE = "idle_allocated"
#: the labels a spell keeps, from the frame's columns (the holder's identity and owner)
SPELL_LABELS: tuple[str, ...] = ("job_id", "pod", "namespace", "user", "team", "project")
#: the placeholders a command template may use
PLACEHOLDERS: tuple[str, ...] = (
    "job",
    "pod",
    "namespace",
    "user",
    "host",
    "gpu",
    "partition",
    "qos",
)


@dataclass(frozen=True, slots=True)
class IdleSpell:
    """A holder idle up to the end of the data: `key` (``job:ID``, ``pod:NS/NAME`` or
    ``gpu:HOST/UUID``), since when (`since_ns`, the first idle interval's start) until when
    (`until_ns`, the last interval's end), `open_start` when it was idle from the window's
    first interval (idle at least that long), and its `labels` (job_id, pod, namespace, user,
    team, project, host, gpu_uuid, gpu_model: several values joined with ","; partition, qos
    when known)."""

    key: str
    since_ns: int
    until_ns: int
    open_start: bool
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def idle_s(self) -> float:
        return (self.until_ns - self.since_ns) / NS

    @property
    def gpus(self) -> int:
        """The GPUs it holds (at least one)."""
        return max(1, len(_parts(self.labels.get("gpu_uuid"))))


@dataclass(frozen=True, slots=True)
class Exemptions:
    """Who is never warned or acted on."""

    users: frozenset[str] = frozenset()
    qos: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()

    def reason(self, labels: Mapping[str, str]) -> str | None:
        """Why `labels` are exempt ("user 'alice' (enforce.exempt_users)"), or None."""
        checks = (
            ("user", "user", self.users, "enforce.exempt_users"),
            ("qos", "QoS", self.qos, "enforce.exempt_qos"),
            ("partition", "partition", self.partitions, "enforce.exempt_partitions"),
            ("namespace", "namespace", self.namespaces, "enforce.exempt_namespaces"),
        )
        for label, what, names, key in checks:
            for value in _parts(labels.get(label)):
                if value in names:
                    return f"{what} {value!r} ({key})"
        return None

    def unknown(self, labels: Mapping[str, str]) -> str | None:
        """The exempting label a holder lacks while some value of it is exempt (a Slurm job's
        user, QoS or partition; a pod's namespace), or None: acting then could hit an exempt
        job."""
        checks: tuple[tuple[str, str, frozenset[str]], ...]
        if labels.get("job_id"):
            checks = (("qos", "QoS", self.qos), ("partition", "partition", self.partitions),
                      ("user", "user", self.users))  # fmt: skip
        elif labels.get("pod"):
            checks = (("namespace", "namespace", self.namespaces),)
        else:
            checks = ()
        for label, what, names in checks:
            if names and not labels.get(label):
                return what
        return None


@dataclass(frozen=True, slots=True)
class Policy:
    """The ladder (seconds), the command templates, and whether commands may run."""

    warn_s: float
    act_s: float
    command: str = "scancel {job}"
    warn_command: str | None = None
    act_enabled: bool = False
    dry_run: bool = True
    exemptions: Exemptions = field(default_factory=Exemptions)

    def __post_init__(self) -> None:
        if not 0 <= self.warn_s <= self.act_s:
            raise ConfigError(
                f"idle escalation: warn level {self.warn_s / 60:g} min and act level "
                f"{self.act_s / 60:g} min must be >= 0 and rising (e.g. 60 and 120)"
            )
        check_template(self.command, "enforce.command")
        if self.warn_command is not None:
            check_template(self.warn_command, "enforce.warn_command")


@dataclass(frozen=True, slots=True)
class Past:
    """What the audit log says of one holder: its latest warning, its latest act record, and
    whether that act ran and exited 0."""

    warned_ns: int | None = None
    acted_ns: int | None = None
    acted_ok: bool = False


@dataclass(frozen=True, slots=True)
class Action:
    """One decision. `level` is what is done now (warn or act); `command` is what runs (or
    would run) for it; `run`: run it now; `record`: write it to the audit log."""

    spell: IdleSpell
    level: str
    exempt: bool
    reason: str
    command: tuple[str, ...] | None = None
    run: bool = False
    record: bool = False


def _parts(value: str | None) -> list[str]:
    return [p for p in (value or "").split(",") if p]


# -- spells --------------------------------------------------------------------------------------
def _column(frame: pa.Table, name: str) -> pa.ChunkedArray | pa.Array:
    if name not in frame.column_names:
        return pa.nulls(frame.num_rows, pa.string())
    column = frame[name]
    return pc.cast(column, pa.string()) if column.type != pa.string() else column


def _holder_keys(frame: pa.Table) -> pa.Array | pa.ChunkedArray:
    """``job:ID``, else ``pod:NS/NAME``, else ``gpu:HOST/UUID`` per row."""
    job, pod = _column(frame, "job_id"), _column(frame, "pod")
    ns, host, uuid = (
        pc.fill_null(_column(frame, c), "") for c in ("namespace", "host", "gpu_uuid")
    )
    by_job = pc.binary_join_element_wise("job", job, ":")
    by_pod = pc.binary_join_element_wise("pod", pc.binary_join_element_wise(ns, pod, "/"), ":")
    by_gpu = pc.binary_join_element_wise("gpu", pc.binary_join_element_wise(host, uuid, "/"), ":")
    return pc.coalesce(by_job, by_pod, by_gpu)


def idle_spells(frame: pa.Table, horizon_ns: int | None = None) -> list[IdleSpell]:
    """The holders idle up to the data's end (`horizon_ns`, default the frame's last interval
    end), from a classified frame (`state`, `start_ns`, `step_s`, labels)."""
    if frame.num_rows == 0 or "state" not in frame.column_names:
        return []
    step_ns = pc.cast(pc.multiply(frame["step_s"], float(NS)), pa.int64())
    end = pc.add(frame["start_ns"], step_ns)
    idle = pc.fill_null(pc.equal(_column(frame, "state"), IDLE_STATE), False)
    keys = _holder_keys(frame)
    rows = pa.table(
        {"key": keys, "start": frame["start_ns"], "end": end, "idle": pc.cast(idle, pa.int8())}
    )
    buckets = rows.group_by(["key", "start"]).aggregate([("idle", "min"), ("end", "max")])
    buckets = buckets.sort_by([("key", "ascending"), ("start", "ascending")])
    key = buckets["key"].to_numpy(zero_copy_only=False)
    start = buckets["start"].to_numpy()
    stop = buckets["end_max"].to_numpy()
    all_idle = buckets["idle_min"].to_numpy() == 1
    first_start = int(start.min())
    horizon = int(stop.max()) if horizon_ns is None else horizon_ns
    heads = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    tails = np.r_[heads[1:], key.size] - 1
    found: list[IdleSpell] = []
    last: dict[str, int] = {}
    for head, tail in zip(heads.tolist(), tails.tolist(), strict=True):
        length = stop[tail] - start[tail]
        if not all_idle[tail] or stop[tail] + length // 2 < horizon:
            continue  # working, gone, or not seen lately: not idle now
        i = tail
        while (
            i > head
            and all_idle[i - 1]
            and start[i] <= stop[i - 1] + (stop[i - 1] - start[i - 1]) // 2
        ):
            i -= 1
        name = str(key[tail])
        last[name] = int(start[tail])
        until = min(int(stop[tail]), horizon)
        found.append(IdleSpell(name, int(start[i]), until, bool(start[i] <= first_start)))
    if not found:
        return []
    labels = _last_labels(frame, keys, last)
    return [replace(s, labels=labels.get(s.key, {})) for s in found]


def _last_labels(
    frame: pa.Table, keys: pa.Array | pa.ChunkedArray, last: Mapping[str, int]
) -> dict[str, dict[str, str]]:
    """Per holder key, the labels of its rows in the interval starting at `last[key]` (several
    values joined with ",", sorted)."""
    names = [c for c in (*SPELL_LABELS, "host", "gpu_uuid", "gpu_model") if c in frame.column_names]
    wanted = pa.table({"key": pa.array(list(last), pa.string()),
                       "start_ns": pa.array(list(last.values()), pa.int64())})  # fmt: skip
    rows = pa.table(
        {"key": keys, "start_ns": frame["start_ns"], **{c: _column(frame, c) for c in names}}
    ).join(wanted, keys=["key", "start_ns"], join_type="inner")
    values: dict[str, dict[str, set[str]]] = {}
    for row in rows.to_pylist():
        into = values.setdefault(row["key"], {})
        for c in names:
            if row[c] is not None and row[c] != "":
                into.setdefault(c, set()).add(str(row[c]))
    return {k: {c: ",".join(sorted(v)) for c, v in got.items()} for k, got in values.items()}


# -- commands ------------------------------------------------------------------------------------
def check_template(template: str, key: str) -> list[str]:
    """The template's arguments (split like a shell line, never run by one); ConfigError when
    it does not split, is empty, or uses a field other than plain `PLACEHOLDERS`."""
    try:
        args = shlex.split(template)
    except ValueError as exc:
        raise ConfigError(
            f"setting {key!r} = {template!r} does not split into arguments: {exc}"
        ) from None
    if not args:
        raise ConfigError(f"setting {key!r} is empty: give a command such as 'scancel {{job}}'")
    for arg in args:
        try:
            parsed = list(string.Formatter().parse(arg))
        except ValueError as exc:
            raise ConfigError(
                f"setting {key!r}: argument {arg!r} is not a template: {exc}"
            ) from None
        for _text, name, spec, conversion in parsed:
            if name is not None and (name not in PLACEHOLDERS or spec or conversion):
                raise ConfigError(
                    f"setting {key!r}: argument {arg!r} uses {{{name}}}: use only plain "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                )
    return args


def fields(labels: Mapping[str, str]) -> dict[str, str]:
    """The placeholders' values from a spell's labels (absent: not known)."""
    source = {
        "job": "job_id",
        "pod": "pod",
        "namespace": "namespace",
        "user": "user",
        "host": "host",
        "gpu": "gpu_uuid",
        "partition": "partition",
        "qos": "qos",
    }
    return {name: labels[label] for name, label in source.items() if labels.get(label)}


def command_args(template: str, values: Mapping[str, str]) -> tuple[tuple[str, ...] | None, str]:
    """The argument list of `template` with each argument filled in from `values` (no shell:
    a value is one argument's text, whatever it holds), or (None, why not): a placeholder
    without a value, or a value that could pass for an option or holds control characters."""
    out = []
    for arg in shlex.split(template):
        for _text, name, _spec, _conv in string.Formatter().parse(arg):
            if name is None:
                continue
            value = values.get(name)
            if value is None:
                return None, f"the command needs {{{name}}}, which this holder has no label for"
            if value.startswith("-") or not value.isprintable():
                return None, f"{{{name}}} = {value!r} is not passed to a command (option-like)"
        out.append(arg.format_map(values))
    return tuple(out), ""


# -- the ladder ----------------------------------------------------------------------------------
def history(records: Iterable[Mapping[str, object]]) -> dict[str, Past]:
    """Per holder key, the latest warning and act records of the audit log (in file order)."""
    out: dict[str, Past] = {}
    for r in records:
        key, ts, level = r.get("key"), r.get("ts_ns"), r.get("level")
        if not isinstance(key, str) or not isinstance(ts, int):
            continue
        past = out.get(key, Past())
        if level == "warn" and (past.warned_ns is None or ts >= past.warned_ns):
            past = replace(past, warned_ns=ts)
        elif level == "act" and (past.acted_ns is None or ts >= past.acted_ns):
            ok = r.get("ran") is True and r.get("exit_code") == 0
            past = replace(past, acted_ns=ts, acted_ok=ok)
        out[key] = past
    return out


def _min(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def decide(
    spells: Sequence[IdleSpell], past: Mapping[str, Past], policy: Policy, now_ns: int
) -> list[Action]:
    """The warnings and actions for `spells`, longest idle first (holders idle less than the
    warning level get none)."""
    out = []
    for spell in sorted(spells, key=lambda s: (-s.idle_s, s.key)):
        if spell.idle_s >= policy.warn_s:
            out.append(_decide_one(spell, past.get(spell.key, Past()), policy, now_ns))
    return out


def _decide_one(spell: IdleSpell, past: Past, policy: Policy, now_ns: int) -> Action:
    idle = spell.idle_s
    at_least = "at least " if spell.open_start else ""
    idled = f"idle {at_least}{_min(idle)}"
    by_time = "act" if idle >= policy.act_s else "warn"
    exempt = policy.exemptions.reason(spell.labels)
    if exempt is not None:
        return Action(spell, by_time, True, f"{idled}; exempt: {exempt}")
    values = fields(spell.labels)
    warned = past.warned_ns is not None and past.warned_ns >= spell.since_ns
    notice_ns = round((policy.act_s - policy.warn_s) * NS)
    if by_time == "warn" or not warned:
        return _warn(spell, past, policy, warned, idled, values)
    assert past.warned_ns is not None
    if now_ns - past.warned_ns < notice_ns:
        wait = (past.warned_ns + notice_ns - now_ns) / NS
        return Action(
            spell, "warn", False,
            f"{idled}; warned {_min((now_ns - past.warned_ns) / NS)} ago: acted on once the "
            f"warning is {_min(notice_ns / NS)} old (in {_min(wait)})",
        )  # fmt: skip
    unknown = policy.exemptions.unknown(spell.labels)
    if unknown:
        return Action(
            spell, "act", False,
            f"{idled}, warned; not acted on: its {unknown} is unknown, so it may be exempt "
            "(squeue --json gives a job's user, QoS and partition; --node-queue a node's "
            "partition)",
        )  # fmt: skip
    args, why_not = command_args(policy.command, values)
    if args is None:
        return Action(spell, "act", False, f"{idled}, warned; cannot act: {why_not}")
    reason = (
        f"{idled} >= {_min(policy.act_s)} and warned {_min((now_ns - past.warned_ns) / NS)} ago"
    )
    acted_here = past.acted_ns is not None and past.acted_ns >= spell.since_ns
    if acted_here and past.acted_ok:
        return Action(spell, "act", False, f"{reason}; already acted on in this spell", args)
    if policy.dry_run:
        return Action(spell, "act", False, f"{reason}; dry run: not run", args)
    if not policy.act_enabled:
        return Action(
            spell, "act", False, f"{reason}; acting is off (enforce.act_enabled): not run", args,
            record=not acted_here,
        )  # fmt: skip
    return Action(spell, "act", False, reason, args, run=True, record=True)


def _warn(
    spell: IdleSpell,
    past: Past,
    policy: Policy,
    warned: bool,
    idled: str,
    values: Mapping[str, str],
) -> Action:
    if warned:
        assert past.warned_ns is not None
        return Action(spell, "warn", False, f"{idled}; already warned in this spell")
    if past.warned_ns is not None:
        reason = (
            f"{idled}; it worked after its last warning, so the idle clock restarted: warned anew"
        )
    elif spell.idle_s >= policy.act_s:
        reason = f"{idled} >= {_min(policy.act_s)} but never warned: warned now, acted on later"
    else:
        reason = f"{idled} >= {_min(policy.warn_s)}: warned"
    args: tuple[str, ...] | None = None
    if policy.warn_command is not None:
        args, why_not = command_args(policy.warn_command, values)
        if args is None:
            reason += f" (no warning command: {why_not})"
    if policy.dry_run:
        return Action(spell, "warn", False, f"{reason}; dry run: not recorded", args)
    return Action(spell, "warn", False, reason, args, run=args is not None, record=True)
