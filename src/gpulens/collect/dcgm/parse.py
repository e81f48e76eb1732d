"""dcgm-exporter `/metrics` text → gpu Readings (pure: text in, readings out, no I/O).

One page becomes one `gpu` Reading per entity (a GPU, or a MIG instance, as seen by one pod or
job), carrying every mapped field as a catalog value in base units, plus one `driver_version`
event per host. What is kept out is counted in `ParseResult.skipped`, by reason:

- `unknown_field`: a series whose DCGM field gpulens does not map (VGPU_LICENSE_STATUS,
  NVLINK_BANDWIDTH_TOTAL, DCGM_EXP_* ...);
- `no_gpu`: a mapped series without a `gpu`/`UUID` label (switch, link or CPU entities);
- `sentinel`: DCGM's in-band "no value" numbers (INT64 blanks ≥ 0x7ffffffffffffff0, INT32
  blanks 0x7ffffff0..0x7fffffff on integer gauges, FP64 blanks ≥ 1.4e14 on gauges);
- `nan`: NaN or ±Inf;
- `non_numeric`: a value that is text, such as `ERROR - FAILED TO CONVERT TO STRING`;
- `unsupported`: memory temperature 0 °C, which GDDR boards (T4, L4, L40S) print for "no
  sensor";
- `duplicate`: the same entity and field again on the page (the last one wins).

Lines are split with a linear-time fast path for dcgm-exporter's shape
(`NAME{label="value",...} VALUE [TIMESTAMP]`); a line it does not recognise is handed to
`prometheus_client.parser.text_string_to_metric_families`, the reference parser, and only when
that rejects it too is the page refused with one `DcgmParseError` naming the source and line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.parser import text_string_to_metric_families

from gpulens import catalog
from gpulens.collect.capture_time import sample_time
from gpulens.collect.dcgm import fields
from gpulens.collect.inputs import DEFAULT_LIMITS, Limits, too_large
from gpulens.errors import CollectError, InputTooLarge
from gpulens.model import FrozenLabels, Kind, Reading, event
from gpulens.numbers import is_nan

INT64_BLANK = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_BLANK; +1 NOT_FOUND, +2 NOT_SUPPORTED, ...
INT32_BLANK = 0x7FFFFFF0  # DCGM_INT32_BLANK
INT32_MAX = 0x7FFFFFFF
FP64_BLANK = 140737488355328.0  # DCGM_FP64_BLANK (2**47)
FP64_BLANK_THRESHOLD = 1.4e14
PSTATE_UNKNOWN = 32.0
CACHE_BYTES = 64 << 20  # parsed label blocks kept for reuse, by their length
ENTITY_BYTES = 64 << 20  # labels of the distinct entities of one page (~64 bytes a label more)

# dcgm-exporter label → gpulens label, first present wins. `exported_*` come first: when a
# Prometheus relabels, the plain names belong to the exporter's own pod, not the workload.
_ALIASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("host", ("Hostname", "hostname")),
    ("gpu_model", ("modelName", "model_name")),
    ("pod", ("exported_pod", "pod", "pod_name")),
    ("namespace", ("exported_namespace", "namespace", "pod_namespace")),
    ("container", ("exported_container", "container", "container_name")),
    ("job_id", ("hpc_job",)),
    ("pci_bus_id", ("pci_bus_id",)),
)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
# A quoted label value, unrolled and possessive: runs of plain characters are matched whole,
# so the regex engine keeps no state per character (a 4 MiB value costs no more than its copy).
_QUOTED = r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"'
# name, optional label block up to the first unquoted '}', the rest. Every alternative is
# disjoint, so matching is linear in the line length and needs constant extra memory.
_LINE = re.compile(
    rf'({_NAME})[ \t]*(?:\{{([^"}}]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^"}}]*+)*+)\}})?(.*)',
    re.DOTALL,
)
_LABEL = re.compile(rf"[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*{_QUOTED}[ \t]*(?:,|$)")
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


class DcgmParseError(CollectError):
    """A page is not dcgm-exporter's text exposition; names the source and line."""

    def __init__(self, source: str, line_no: int, problem: str, line: str) -> None:
        excerpt = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(
            f"{source}: line {line_no}: {problem}: {excerpt!r}. Expected Prometheus text "
            'exposition (NAME{label="value",...} VALUE) as dcgm-exporter serves on /metrics: '
            "check that the URL points at dcgm-exporter and that the page was not cut off"
        )
        self.source = source
        self.line_no = line_no
        self.problem = problem


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The readings of one page and, by reason, the series kept out of them."""

    readings: list[Reading]
    skipped: dict[str, int] = field(default_factory=dict)
    sample_ts: int | None = None  # the page's latest sample timestamp (UTC ns), if it has any


@dataclass(slots=True)
class _Entity:
    labels: FrozenLabels
    values: dict[str, float]


# Per distinct label block: (entity key, identity labels, driver version) or None (no GPU).
_Identity = tuple[frozenset[tuple[str, str]], FrozenLabels, str | None] | None


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), value)


def _parse_labels(raw: str) -> dict[str, str] | None:
    """`a="1",b="2"` → dict; None when the block is malformed or repeats a name."""
    out: dict[str, str] = {}
    pos, end = 0, len(raw)
    while pos < end:
        m = _LABEL.match(raw, pos)
        if m is None:
            return out if not raw[pos:].strip(" \t") else None
        name, value = m.group(1), m.group(2)
        if name in out:
            return None
        out[name] = _unescape(value) if "\\" in value else value
        pos = m.end()
    return out


def identity(labels: Mapping[str, str], default_host: str | None) -> _Identity:
    """gpulens identity labels of one series (None when it names no GPU).

    A MIG series (GPU_I_ID present) is its own entity: `gpu_uuid` = "<parent UUID>/gi<id>",
    `parent_uuid` = the UUID label, `mig_instance` = GPU_I_ID, `mig_profile` = GPU_I_PROFILE.
    """
    uuid = labels.get("UUID") or labels.get("uuid") or ""
    index = labels.get("gpu", "")
    if not uuid and not index:
        return None
    out: dict[str, str] = {}
    gi = labels.get("GPU_I_ID", "")
    if gi:
        if uuid:
            out["gpu_uuid"] = f"{uuid}/gi{gi}"
            out["parent_uuid"] = uuid
        out["mig_instance"] = gi
        profile = labels.get("GPU_I_PROFILE", "")
        if profile:
            out["mig_profile"] = profile
    elif uuid:
        out["gpu_uuid"] = uuid
    if index:
        out["gpu_index"] = index
    for key, names in _ALIASES:
        for name in names:
            value = labels.get(name)
            if value:
                out[key] = value
                break
    if "host" not in out and default_host:
        out["host"] = default_host
    driver = None
    for name in fields.LABEL_FIELDS:
        driver = labels.get(name) or driver
    frozen = FrozenLabels(dict(sorted(out.items())))
    return frozen.identity, frozen, driver


def _number(token: str) -> float | int | None:
    """A sample value as prometheus_client reads it (int when exact), None when not a number."""
    if "_" in token:
        return None
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return None


def _blank(value: float | int, spec: fields.FieldSpec) -> bool:
    """True when `value` is one of DCGM's in-band "no value" marks for this field."""
    if value >= INT64_BLANK:
        return True
    if spec.counter:
        return False
    if value >= FP64_BLANK_THRESHOLD:
        return True
    return spec.int32_blank and INT32_BLANK <= value <= INT32_MAX and float(value).is_integer()


class _Page:
    """State of one parse: entities in first-seen order, skip counts, label-block cache."""

    __slots__ = (
        "cache",
        "cache_bytes",
        "default_host",
        "drivers",
        "entities",
        "entity_bytes",
        "latest",
        "limits",
        "skipped",
        "source",
    )

    def __init__(self, source: str, default_host: str | None, limits: Limits) -> None:
        self.source = source
        self.default_host = default_host
        self.limits = limits
        self.entities: dict[frozenset[tuple[str, str]], _Entity] = {}
        self.entity_bytes = 0
        self.skipped: dict[str, int] = {}
        self.cache: dict[str, _Identity] = {}
        self.cache_bytes = 0
        self.drivers: dict[str, str] = {}
        self.latest: int | None = None  # the latest sample timestamp seen (UTC ns)

    def identity_of(self, raw: str, line_no: int) -> _Identity | Literal[False]:
        """The identity of a label block (cached); False when the block is malformed."""
        if raw in self.cache:
            return self.cache[raw]
        labels = _parse_labels(raw)
        if labels is None:
            return False
        self.check_values(labels, line_no)
        if self.cache_bytes + len(raw) > CACHE_BYTES:
            self.cache.clear()
            self.cache_bytes = 0
        ident = self.cache[raw] = identity(labels, self.default_host)
        self.cache_bytes += len(raw)
        return ident

    def check_values(self, labels: Mapping[str, str], line_no: int) -> None:
        """Refuse a label value longer than `limits.max_string_bytes`."""
        limit = self.limits.max_string_bytes
        for name, value in labels.items():
            if len(value) > limit:
                where = f"{self.source}, line {line_no}"
                raise too_large(where, f"the value of label {name!r}", limit, "max_string_bytes")

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def sample(self, name: str, ident: _Identity, value: float) -> None:
        """Add one sample of entity `ident` to the page (or count why it is kept out)."""
        spec = fields.lookup(name)
        if ident is not None and ident[2] is not None:
            self.drivers.setdefault(ident[1].get("host") or "", ident[2])
        if spec is None:
            self.skip("unknown_field")
            return
        if ident is None:
            self.skip("no_gpu")
            return
        if is_nan(value) or value in (math.inf, -math.inf):
            self.skip("nan")
            return
        if _blank(value, spec):
            self.skip("sentinel")
            return
        converted = spec.convert(float(value))
        if spec.field_id == 190 and converted == PSTATE_UNKNOWN:
            self.skip("sentinel")
            return
        if spec.field_id == 140 and converted == 0.0:
            self.skip("unsupported")  # GDDR boards (T4, L4, L40S) print memory temp 0
            return
        entity = self.entities.get(ident[0])
        if entity is None:
            self.entity_bytes += sum(len(k) + len(v) + 64 for k, v in ident[1].items())
            if self.entity_bytes > ENTITY_BYTES:
                raise InputTooLarge(
                    f"{self.source}: its {len(self.entities):,} entities carry more than "
                    f"{ENTITY_BYTES:,} bytes of labels, more than one page of one exporter "
                    "holds; ingest the pages of each exporter separately"
                )
            entity = self.entities[ident[0]] = _Entity(ident[1], {})
        if spec.metric in entity.values:
            self.skip("duplicate")
        entity.values[spec.metric] = converted

    def fallback(self, line_no: int, line: str, problem: str) -> None:
        """Hand a line the fast path refused to prometheus_client; refuse the page if it fails."""
        try:
            families = list(text_string_to_metric_families(line))
        except Exception as exc:  # the reference parser raises ValueError, IndexError, ...
            raise DcgmParseError(self.source, line_no, problem, line) from exc
        for family in families:
            for s in family.samples:
                self.check_values(s.labels, line_no)
                # A single line has no TYPE, so the sample keeps the name it was printed with.
                self.sample(s.name, identity(s.labels, self.default_host), s.value)

    def comment(self, line_no: int, line: str) -> None:
        """`# HELP name ...` and `# TYPE name type` must name a metric; other comments pass."""
        parts = line[1:].split(None, 2)
        if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
            return
        if parts[1][:1] == '"' or re.fullmatch(_NAME, parts[1]):
            if parts[0] == "TYPE" and len(parts) < 3:
                raise DcgmParseError(self.source, line_no, "TYPE line without a type", line)
            return
        raise DcgmParseError(self.source, line_no, f"invalid metric name in {parts[0]}", line)

    def result(self, ts_ns: int) -> ParseResult:
        readings: list[Reading] = []
        for entity in self.entities.values():
            values = entity.values
            reasons = values.get("clocks_event_reasons")
            if reasons is not None:
                bits = int(reasons)
                values["throttle_power_ratio"] = 1.0 if bits & catalog.POWER_REASON_BITS else 0.0
                values["throttle_thermal_ratio"] = (
                    1.0 if bits & catalog.THERMAL_REASON_BITS else 0.0
                )
            readings.append(Reading(Kind.GPU, ts_ns, entity.labels, values))
        for host, version in self.drivers.items():
            labels = {"host": host, "source": self.source} if host else {"source": self.source}
            labels["driver_version"] = version
            readings.append(event(ts_ns, "driver_version", f"NVIDIA driver {version}", labels))
        return ParseResult(readings, self.skipped, self.latest)


def parse_exposition(
    text: str,
    source: str,
    ts_ns: int,
    default_host: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> ParseResult:
    """Parse one dcgm-exporter page scraped at `ts_ns` (UTC ns) into gpu Readings.

    `source` names the input in errors and on the driver-version event (a URL or a file
    path). `default_host` labels GPUs whose series carry no `Hostname`/`hostname` label.
    Sample timestamps on the page, if any, are ignored: every reading is stamped `ts_ns`.
    Raises DcgmParseError (naming `source` and the line) when the page is not exposition text,
    InputTooLarge when a line or a label value passes `limits`.
    """
    return parse_exposition_lines(
        enumerate(text.split("\n"), start=1), source, ts_ns, default_host, limits
    )


def parse_exposition_lines(
    lines: Iterable[tuple[int, str]],
    source: str,
    ts_ns: int,
    default_host: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    sample_times: bool = False,
) -> ParseResult:
    """`parse_exposition` over (line number, line) pairs, so a file is read one line at a time.
    With `sample_times`, a page whose samples carry timestamps is stamped with the latest of
    them instead of `ts_ns` (`sample_ts` says whether it had any).

    Memory is bounded by the page's entities, not its length: the cache of parsed label
    blocks is emptied when it holds more than `CACHE_BYTES`, and a page whose distinct entities
    carry more than `ENTITY_BYTES` of labels is refused with InputTooLarge.
    """
    page = _Page(source, default_host, limits)
    match = _LINE.fullmatch
    max_line = limits.max_line_bytes
    for line_no, raw_line in lines:
        if len(raw_line) > max_line:
            raise too_large(f"{source}, line {line_no}", "the line", max_line, "max_line_bytes")
        line = raw_line.strip()
        if not line:
            continue
        if line[0] == "#":
            page.comment(line_no, line)
            continue
        m = match(line)
        if m is None:
            page.fallback(line_no, line, "not a sample line")
            continue
        name, raw, rest = m.groups()
        if raw is None and rest[:1] not in (" ", "\t"):
            page.fallback(line_no, line, "no value after the metric name")
            continue
        tokens = rest.split()
        if not tokens:
            page.fallback(line_no, line, "no value")
            continue
        value = _number(tokens[0])
        if value is None and raw is not None and tokens[0][0].isalpha():
            page.skip("non_numeric")  # e.g. ERROR - FAILED TO CONVERT TO STRING
            continue
        if value is None or len(tokens) > 2 or (len(tokens) == 2 and _number(tokens[1]) is None):
            page.fallback(line_no, line, "expected a number and an optional timestamp")
            continue
        ident = page.identity_of(raw or "", line_no)
        if ident is False:
            page.fallback(line_no, line, "malformed labels")
            continue
        if len(tokens) == 2:
            stamp = sample_time(tokens[1])
            if stamp is not None and (page.latest is None or stamp > page.latest):
                page.latest = stamp
        page.sample(name, ident, value)
    return page.result(page.latest if sample_times and page.latest else ts_ns)
