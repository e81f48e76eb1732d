"""Settings: declared once in SETTINGS, read from a TOML file plus environment, validated once.

Precedence: built-in default < config file < environment (`GPULENS_<SECTION>_<KEY>`, e.g.
`GPULENS_COLLECT_INTERVAL_SECONDS=5`) < explicit overrides (command-line flags). Every error
names the key, quotes the bad value, says where it came from and what is allowed.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulens.errors import ConfigError
from gpulens.numbers import is_nan

if TYPE_CHECKING:
    from gpulens.store.location import StorePath

ENV_PREFIX = "GPULENS_"
COLLECTOR_NAMES: tuple[str, ...] = ("simulated", "nvml", "host", "dcgm", "nvidia_smi")


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: dotted key, type, default, allowed range or choices, and help text."""

    key: str
    type: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    item_choices: tuple[str, ...] | None = None

    @property
    def env_name(self) -> str:
        return ENV_PREFIX + self.key.replace(".", "_").upper()


def _default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "gpulens")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "data_dir",
        str,
        None,
        "Directory of the Parquet store, or an object-store URL (s3://bucket/prefix, "
        "gs://...; docs/storage.md) (default $XDG_DATA_HOME/gpulens, else "
        "~/.local/share/gpulens).",
    ),
    Setting("host", str, None, "Host name written on every reading (default: this machine's)."),
    Setting(
        "collect.interval_seconds",
        float,
        1.0,
        "Seconds between two collection ticks.",
        minimum=0.1,
        maximum=60.0,
    ),
    Setting(
        "collect.timeout_seconds",
        float,
        None,
        "A collector that takes longer in one tick is "
        "abandoned for that tick and counted as timed out (default: 0.9 × the interval).",
        minimum=0.01,
        maximum=60.0,
    ),
    Setting(
        "collect.collectors",
        list,
        ["nvml", "host"],
        "Sources to read, in order.",
        item_choices=COLLECTOR_NAMES,
    ),
    Setting(
        "store.flush_seconds",
        float,
        10.0,
        "Seconds of readings buffered before a segment "
        "is written; a crash loses at most this much.",
        minimum=0.1,
        maximum=3600.0,
    ),
    Setting(
        "store.retention_days",
        int,
        30,
        "Day partitions older than this are deleted.",
        minimum=1,
        maximum=36500,
    ),
    Setting(
        "store.compact_after_seconds",
        float,
        600.0,
        "Segments older than this are merged into larger files (a pass every half of it).",
        minimum=60.0,
        maximum=86400.0 * 7,
    ),
    Setting(
        "store.max_buffered_rows",
        int,
        200_000,
        "Most readings kept in memory while flushes fail (disk full, read-only): about 1.5 "
        "hours of an 8-GPU node at 1 s, roughly 1 kB of memory each. Beyond it the oldest are "
        "dropped and counted; the rest are written when the disk takes writes again.",
        minimum=1000,
        maximum=100_000_000,
    ),
    Setting(
        "store.aws_endpoint_url",
        str,
        None,
        "S3 endpoint for an s3:// data_dir (an S3-compatible server: MinIO, Ceph, ...); "
        "default: $AWS_ENDPOINT_URL, else AWS itself.",
    ),
    Setting(
        "store.aws_access_key_id",
        str,
        None,
        "Access key for an s3:// data_dir (default: $AWS_ACCESS_KEY_ID, else AWS's "
        "credential chain).",
    ),
    Setting(
        "store.aws_secret_access_key",
        str,
        None,
        "Secret key for an s3:// data_dir (default: $AWS_SECRET_ACCESS_KEY).",
    ),
    Setting(
        "store.aws_region",
        str,
        None,
        "Region of the bucket of an s3:// data_dir (default: $AWS_REGION).",
    ),
    Setting(
        "simulated.hosts",
        int,
        3,
        "Simulated hosts (3 × 4 GPUs fits all nine scenarios at once).",
        minimum=1,
        maximum=256,
    ),
    Setting("simulated.gpus_per_host", int, 4, "Simulated GPUs per host.", minimum=1, maximum=16),
    Setting(
        "simulated.seed",
        int,
        0,
        "Seed of the simulated fleet (same seed, same data).",
        minimum=0,
        maximum=2**32 - 1,
    ),
    Setting("simulated.scenarios", list, [], "Scenarios to run (empty: all of them)."),
    Setting(
        "simulated.speed",
        float,
        1.0,
        "Simulated seconds per wall-clock second.",
        minimum=0.01,
        maximum=1e6,
    ),
    Setting("nvidia_smi.binary", str, "nvidia-smi", "The nvidia-smi command to run."),
    Setting(
        "nvidia_smi.mode",
        str,
        "xml",
        "xml: `nvidia-smi -q -x` (GPUs, MIG, processes); csv: `--query-gpu` (GPUs only, cheaper).",
        choices=("xml", "csv"),
    ),
    Setting(
        "dcgm.urls",
        list,
        [],
        "dcgm-exporter /metrics URLs to scrape, e.g. http://127.0.0.1:9400/metrics.",
    ),
    Setting(
        "dcgm.timeout_seconds",
        float,
        2.0,
        "Deadline of one dcgm-exporter request, from the connect to the last byte of the page.",
        minimum=0.1,
        maximum=60.0,
    ),
    Setting(
        "dcgm.max_page_bytes",
        int,
        8 * 1024 * 1024,
        "Largest dcgm-exporter page read (a real one is a few kB per GPU); a larger page is "
        "cut off and counted as a failed scrape.",
        minimum=1024,
        maximum=1024**3,
    ),
    Setting(
        "agent.listen",
        str,
        "127.0.0.1:9477",
        "HOST:PORT the agent serves /metrics, the dashboard and its API on (9477: clear of "
        "dcgm-exporter's 9400 and node_exporter's 9100). A non-loopback address needs a token.",
    ),
    Setting(
        "agent.token",
        str,
        None,
        "Bearer token the dashboard, API and /metrics require (header `Authorization: Bearer "
        "T`, or `?token=T` once in the browser). At least 16 characters. Required when the agent "
        "listens beyond loopback.",
    ),
    Setting(
        "agent.dcgm_names",
        bool,
        False,
        "Also export the GPU metrics under dcgm-exporter's names and units "
        "(DCGM_FI_PROF_SM_ACTIVE, "
        "...), so dashboards built for dcgm-exporter work unchanged.",
    ),
    Setting(
        "agent.pid_labels",
        bool,
        False,
        "Put the PID on process series (unbounded label values: off by default).",
    ),
    Setting(
        "agent.state_window_seconds",
        float,
        60.0,
        "Length of the interval a GPU's live state and useful work are computed over.",
        minimum=5.0,
        maximum=3600.0,
    ),
    Setting(
        "agent.findings_every_seconds",
        float,
        60.0,
        "How often the agent runs the findings rules over its recent history.",
        minimum=5.0,
        maximum=86400.0,
    ),
    Setting(
        "agent.findings_window_seconds",
        float,
        3600.0,
        "How much recent history the agent's findings pass covers.",
        minimum=60.0,
        maximum=30 * 86400.0,
    ),
    Setting(
        "agent.trace_dirs",
        list,
        [],
        "Directories whose PyTorch profiler traces the dashboard may open by name (nothing "
        "outside them is ever read).",
    ),
    Setting(
        "agent.max_upload_bytes",
        int,
        256 * 1024 * 1024,
        "Largest trace file the dashboard accepts as an upload or opens by name.",
        minimum=1024,
        maximum=64 * 1024**3,
    ),
    Setting(
        "limits.max_inflated_bytes",
        int,
        4 * 1024**3,
        "Largest input after decompression (a trace, a capture, a CSV export, an upload); a "
        "larger one, or a gzip file that inflates past it, is refused.",
        minimum=1024,
        maximum=1024**4,
    ),
    Setting(
        "limits.max_events",
        int,
        8_000_000,
        "Most timed events read from one trace file (flows and metadata not counted); the "
        "analysis of a trace peaks at about 160 bytes per event, so the default keeps it "
        "within 1.5 GB.",
        minimum=1,
        maximum=10**10,
    ),
    Setting(
        "limits.max_string_bytes",
        int,
        1024 * 1024,
        "Longest single string value in a trace, label value in a capture, or text of an "
        "nvidia-smi XML element.",
        minimum=64,
        maximum=1024**3,
    ),
    Setting(
        "limits.max_line_bytes",
        int,
        4 * 1024 * 1024,
        "Longest line in a line-oriented input (exposition text, CSV, nvidia-smi output).",
        minimum=256,
        maximum=1024**3,
    ),
    Setting(
        "limits.max_nesting",
        int,
        64,
        "Deepest nesting of objects and arrays inside one trace event, or of elements in an "
        "nvidia-smi XML dump.",
        minimum=4,
        maximum=10_000,
    ),
    Setting(
        "ingest.timezone",
        str,
        "UTC",
        "Time zone in which `gpulens ingest` reads the times nvidia-smi prints (local time "
        "without a zone): an IANA name such as Europe/Berlin; `--tz` overrides it.",
    ),
    Setting(
        "analysis.max_gap_seconds",
        float,
        0.0,
        "Longest gap a reading covers until the next reading of its GPU; beyond it the time "
        "has no data. 0: twice the GPU's sampling interval (median spacing of its readings).",
        minimum=0.0,
    ),
    Setting("procs.proc_root", str, "/proc", "Where the process table is mounted."),
    Setting(
        "procs.hpc_job_mapping_dir",
        str,
        None,
        "dcgm-exporter style job mapping: one file per GPU index listing the job ids on it.",
    ),
    Setting("cost.currency", str, "USD", "Currency of every price."),
    Setting(
        "cost.gpu_hour_prices",
        list,
        [],
        'Price per GPU-hour by model, as "MODEL=PRICE" (e.g. "H100=4.5"); overrides the '
        "shipped indicative prices for those models.",
    ),
    Setting(
        "cost.unknown_gpu_hour_price",
        float,
        2.0,
        "Price per GPU-hour of a model with no price.",
        minimum=0.0,
        maximum=1000.0,
    ),
    Setting(
        "cost.electricity_per_kwh",
        float,
        0.0,
        "Electricity price per kWh (0: included in the GPU-hour price, as on cloud).",
        minimum=0.0,
        maximum=10.0,
    ),
    Setting(
        "cost.pue", float, 1.2, "Power usage effectiveness of the site.", minimum=1.0, maximum=5.0
    ),
    Setting(
        "carbon.region",
        str,
        "world",
        "Grid region for carbon intensity (docs/analysis/waste-and-fairness.md lists them).",
    ),
    Setting(
        "carbon.intensity_g_per_kwh",
        float,
        None,
        "Grid carbon intensity in gCO2e/kWh; overrides carbon.region.",
        minimum=0.0,
        maximum=2000.0,
    ),
    Setting(
        "fairness.quotas",
        list,
        [],
        'Quota shares as "NAME=SHARE" for the groups of fairness.quota_by (e.g. "vision=0.3").',
    ),
    Setting(
        "fairness.quota_by",
        str,
        "team",
        "Which label quotas are set for.",
        choices=("user", "team", "project"),
    ),
    Setting(
        "thresholds.states",
        list,
        [],
        'Overrides of the state thresholds as "NAME=VALUE" (e.g. "sm_low=0.4"); names are the '
        "fields of gpulens.analyze.efficiency.Thresholds (docs/analysis/states.md).",
    ),
    Setting(
        "thresholds.findings",
        list,
        [],
        'Overrides of the finding thresholds as "NAME=VALUE" (e.g. "warning_duration_s=1800"); '
        "names are the fields of gpulens.findings.context.FindingThresholds (the idle ladder "
        "is findings.idle_allocated.*).",
    ),
    Setting(
        "findings.idle_allocated.info_minutes",
        float,
        10.0,
        "A GPU held idle this long is an idle_allocated finding (info; the idle ladder).",
        minimum=0.0,
        maximum=10080.0,
    ),
    Setting(
        "findings.idle_allocated.warn_minutes",
        float,
        60.0,
        "An idle_allocated finding warns from this long (jobstats: 60 min); also the `for:` of the "
        "GpulensGpuIdleAllocated alert that `gpulens rules` writes, and the warning level of "
        "`gpulens enforce`.",
        minimum=0.0,
        maximum=10080.0,
    ),
    Setting(
        "findings.idle_allocated.act_minutes",
        float,
        120.0,
        "An idle_allocated finding is critical (act on it) from this long (jobstats: 120 min); "
        "`gpulens enforce` acts on a warned job from this long.",
        minimum=0.0,
        maximum=10080.0,
    ),
    Setting(
        "enforce.act_enabled",
        bool,
        False,
        "Let `gpulens enforce --no-dry-run` run enforce.command on jobs idle past "
        "findings.idle_allocated.act_minutes (off: it warns and records only).",
    ),
    Setting(
        "enforce.command",
        str,
        "scancel {job}",
        "The command `gpulens enforce` runs to act on an idle job, without a shell: split like a "
        "shell line, then each argument filled in from {job}, {pod}, {namespace}, {user}, "
        "{host}, {gpu}, {partition}, {qos} (e.g. kubectl delete pod {pod} -n {namespace}).",
    ),
    Setting(
        "enforce.warn_command",
        str,
        None,
        "A command `gpulens enforce --no-dry-run` runs for each new warning (same placeholders as "
        "enforce.command; e.g. a script that mails {user}); none by default.",
    ),
    Setting(
        "enforce.command_timeout_seconds",
        float,
        60.0,
        "An enforce command still running after this long is stopped and recorded as failed.",
        minimum=1.0,
        maximum=3600.0,
    ),
    Setting(
        "enforce.exempt_users",
        list,
        [],
        "Users whose jobs `gpulens enforce` never warns or acts on.",
    ),
    Setting(
        "enforce.exempt_qos",
        list,
        [],
        "Slurm QoS names exempt from `gpulens enforce` (the QoS comes from squeue --json).",
    ),
    Setting(
        "enforce.exempt_partitions",
        list,
        [],
        "Slurm partitions (or queues) exempt from `gpulens enforce`.",
    ),
    Setting(
        "enforce.exempt_namespaces",
        list,
        [],
        "Kubernetes namespaces exempt from `gpulens enforce`.",
    ),
    Setting(
        "enforce.audit_log",
        str,
        None,
        "The append-only JSON-lines log of every warning and action of `gpulens enforce` "
        "(default: enforce-audit.jsonl in the data directory).",
    ),
    Setting(
        "thresholds.memory",
        list,
        [],
        'Overrides of the memory thresholds as "NAME=VALUE" (e.g. "leak_min_r2=0.9"); names are '
        "the fields of gpulens.analyze.memory.MemorySettings.",
    ),
    Setting(
        "procs.pod_labels_file",
        str,
        None,
        "JSON file mapping pod UID to pod, namespace, container and labels.",
    ),
    Setting(
        "prometheus.url",
        str,
        None,
        "Prometheus, Thanos, Mimir or VictoriaMetrics query URL (the part before /api/v1) that "
        "report, ingest and fleet read with --prometheus.",
    ),
    Setting(
        "prometheus.bearer_token_file",
        str,
        None,
        "File holding a bearer token sent with every Prometheus request.",
    ),
    Setting("prometheus.username", str, None, "User name for Prometheus basic auth."),
    Setting(
        "prometheus.password_file", str, None, "File holding the Prometheus basic auth password."
    ),
    Setting(
        "prometheus.ca_file",
        str,
        None,
        "PEM file of the CA that signed the Prometheus server's certificate.",
    ),
    Setting(
        "prometheus.tls_verify",
        bool,
        True,
        "Verify the Prometheus server's TLS certificate (turn off only for a test server).",
    ),
    Setting(
        "prometheus.timeout_seconds",
        float,
        120.0,
        "Deadline of one Prometheus request, from the connect to the last byte.",
        minimum=1.0,
        maximum=3600.0,
    ),
    Setting(
        "prometheus.retries",
        int,
        3,
        "Retries of a failed Prometheus request.",
        minimum=0,
        maximum=10,
    ),
    Setting(
        "prometheus.max_response_bytes",
        int,
        512 * 1024 * 1024,
        "Byte limit of one Prometheus answer.",
        minimum=1024,
        maximum=2**40,
    ),
    Setting(
        "prometheus.max_points",
        int,
        10_999,
        "Points per series in one range query (Prometheus refuses more than 11,000).",
        minimum=1,
        maximum=1_000_000,
    ),
    Setting(
        "prometheus.max_samples",
        int,
        50_000_000,
        "The server's query.max-samples: range queries are cut so each stays under half of it.",
        minimum=1000,
        maximum=10**12,
    ),
    Setting(
        "prometheus.selector",
        str,
        None,
        'Label matchers added to every series read (e.g. cluster="a") for a server that holds '
        "several clusters.",
    ),
    Setting(
        "prometheus.labels",
        list,
        [],
        'Label renames for sites that relabel, as "GPULENS_LABEL=SITE_LABEL" (e.g. '
        '"host=node", "job_id=slurm_job"); see docs/collectors/prometheus.md.',
    ),
    Setting(
        "prometheus.series",
        list,
        [],
        'Extra series names, as "SERIES=METRIC[:UNIT]" (unit percent, milliwatts, mib or mhz), '
        'e.g. "site_gpu_busy=gpu_util_ratio:percent".',
    ),
    Setting(
        "prometheus.team_label",
        str,
        "label_team",
        "The kube-state-metrics kube_pod_labels label that names a pod's team.",
    ),
    Setting(
        "inference.objective_ms",
        float,
        100.0,
        "The serving latency objective in milliseconds: the report's engine choice by load "
        "says up to which QPS the native engine holds it (docs/inference.md).",
        minimum=0.001,
        maximum=3_600_000.0,
    ),
    Setting(
        "inference.objective_quantile",
        str,
        "p95",
        "The latency quantile the objective applies to.",
        choices=("p50", "p90", "p95", "p99"),
    ),
    Setting(
        "profile.steps",
        int,
        5,
        "Steps a tracked process profiles on `gpulens profile` (or an automatic request).",
        minimum=1,
        maximum=1000,
    ),
    Setting(
        "profile.auto",
        bool,
        False,
        "Let findings on a tracked job (input_bound) request a profile of it themselves, once "
        "per job (docs/inference.md, profiling on demand).",
    ),
    Setting(
        "profile.auto_every_minutes",
        float,
        60.0,
        "At most one automatic profile request in this many minutes, over all jobs.",
        minimum=1.0,
        maximum=10080.0,
    ),
)

BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}


def _describe_allowed(s: Setting) -> str:
    if s.choices:
        return "one of " + ", ".join(s.choices)
    if s.item_choices:
        return "a list drawn from " + ", ".join(s.item_choices)
    kind = {
        float: "a number",
        int: "an integer",
        str: "a string",
        list: "a list",
        bool: "true or false",
    }[s.type]
    if s.minimum is not None and s.maximum is not None:
        return f"{kind} between {s.minimum:g} and {s.maximum:g}"
    return kind


def _cut(text: str, limit: int) -> str:
    """`text`, or its first part and its length when longer than `limit` characters."""
    return text if len(text) <= limit else f"{text[: limit - 24]}… ({len(text)} characters)"


def _quote(raw: Any, limit: int = 80) -> str:
    """`raw` as Python writes it, cut to about `limit` characters (an integer too long to
    write, as its number of digits)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 3 * limit:
        return f"<an integer of about {int(raw.bit_length() * 0.30103) + 1} digits>"
    return _cut(repr(raw), limit)


def _coerce(s: Setting, raw: Any, origin: str) -> Any:
    """Convert `raw` (from TOML or an environment string) to the setting's type and check it."""

    def bad(why: str = "") -> ConfigError:
        tail = f" ({why})" if why else ""
        return ConfigError(
            f"setting {s.key!r} = {_quote(raw)} from {origin} is not allowed{tail}: expected "
            f"{_describe_allowed(s)}. {s.help}"
        )

    if "\x00" in (raw if isinstance(raw, str) else "") or (
        isinstance(raw, list) and any(isinstance(i, str) and "\x00" in i for i in raw)
    ):
        raise bad("it contains a NUL character")

    value: Any
    if s.type is list:
        if isinstance(raw, str):
            value = [item.strip() for item in raw.split(",") if item.strip()]
        elif isinstance(raw, list) and all(isinstance(i, str) for i in raw):
            value = list(raw)
        else:
            raise bad()
        if s.item_choices:
            unknown = [i for i in value if i not in s.item_choices]
            if unknown:
                raise bad(f"unknown {_cut(', '.join(map(repr, unknown)), 120)}")
        return value
    if s.type is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in {
            "1",
            "true",
            "yes",
            "on",
            "0",
            "false",
            "no",
            "off",
        }:
            return raw.lower() in {"1", "true", "yes", "on"}
        raise bad()
    if s.type is str:
        if not isinstance(raw, str) or not raw:
            raise bad()
        value = raw
    else:
        converter: Callable[[Any], Any] = s.type
        if isinstance(raw, bool):
            raise bad()
        try:
            value = converter(raw)
        except (TypeError, ValueError, OverflowError):
            raise bad() from None
        if s.type is int and isinstance(raw, float) and not raw.is_integer():
            raise bad()
        if is_nan(value) or value in (float("inf"), float("-inf")):
            raise bad()
    if s.choices and value not in s.choices:
        raise bad()
    if s.minimum is not None and value < s.minimum:
        raise bad("too small")
    if s.maximum is not None and value > s.maximum:
        raise bad("too large")
    return value


#: the most dotted parts a setting's key has (findings.idle_allocated.info_minutes)
KEY_DEPTH = max(s.key.count(".") + 1 for s in SETTINGS)


def _flatten(table: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys → values of a parsed TOML document. A table nested deeper than any setting
    stops the descent: its key (cut at one part too many) is then an unknown setting."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Mapping[str, Any]]] = [("", table)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict) and dotted.count(".") < KEY_DEPTH:
                stack.append((dotted + ".", value))
            else:
                out[dotted] = value
    return out


@dataclass(frozen=True, slots=True)
class Config:
    """Validated settings: `get(key)` returns the typed value."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]

    def get(self, key: str) -> Any:
        if key not in BY_KEY:
            raise KeyError(f"unknown setting {key!r}")
        return self.values[key]

    @property
    def data_dir(self) -> StorePath:
        """The store: a local `Path`, or an `ObjectPath` for an object-store URL (with the
        `store.aws_*` settings as its credentials)."""
        from gpulens.store.location import open_location

        return open_location(str(self.values["data_dir"]), self.store_options)

    @property
    def store_options(self) -> dict[str, str | None]:
        """The `store.aws_*` settings, as `open_location` takes them."""
        from gpulens.store.location import S3_KEYS

        return {k: self.values.get(f"store.{k}") for k in S3_KEYS}

    @property
    def host(self) -> str:
        return str(self.values["host"])


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Read defaults, then the TOML file at `path`, then `env`, then `overrides`; validate all."""
    environ = os.environ if env is None else env
    raw: dict[str, tuple[Any, str]] = {}
    if path is not None:
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {str(path)!r} is not UTF-8 text (byte {exc.start} is "
                f"{exc.object[exc.start : exc.start + 1]!r}): save it as UTF-8, as TOML requires"
            ) from None
        except FileNotFoundError:
            raise ConfigError(
                f"config file {str(path)!r} does not exist: pass an existing "
                "TOML file with --config, or leave it out"
            ) from None
        except OSError as exc:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
        try:
            table = tomllib.loads(text)
        except ValueError as exc:  # TOMLDecodeError, or an integer too long to convert
            raise ConfigError(
                f"config file {str(path)!r} is not valid TOML: {_cut(str(exc), 200)}"
            ) from None
        except RecursionError:
            raise ConfigError(
                f"config file {str(path)!r} nests arrays or inline tables too deeply to read: "
                "no setting needs more than a list of strings"
            ) from None
        for key, value in _flatten(table).items():
            if key not in BY_KEY:
                known = ", ".join(sorted(BY_KEY))
                raise ConfigError(
                    f"config file {str(path)!r} has unknown setting {_quote(key)}; "
                    f"known settings: {known}"
                )
            raw[key] = (value, f"config file {str(path)!r}")
    env_names = {s.env_name: s for s in SETTINGS}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and name in env_names:
            raw[env_names[name].key] = (value, f"environment variable {name}")
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in BY_KEY:
            raise ConfigError(f"unknown setting {key!r}")
        raw[key] = (value, "the command line")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for s in SETTINGS:
        if s.key in raw:
            value, origin = raw[s.key]
            values[s.key] = _coerce(s, value, origin)
            sources[s.key] = origin
        else:
            values[s.key] = list(s.default) if isinstance(s.default, list) else s.default
            sources[s.key] = "default"
    if values["data_dir"] is None:
        values["data_dir"] = _default_data_dir()
    if values["host"] is None:
        values["host"] = socket.gethostname()
    if values["collect.timeout_seconds"] is None:
        values["collect.timeout_seconds"] = 0.9 * values["collect.interval_seconds"]
    elif values["collect.timeout_seconds"] > values["collect.interval_seconds"]:
        raise ConfigError(
            f"setting 'collect.timeout_seconds' = {values['collect.timeout_seconds']!r} from "
            f"{sources['collect.timeout_seconds']} is longer than 'collect.interval_seconds' = "
            f"{values['collect.interval_seconds']!r}: a collector may not run past the next tick; "
            "lower the timeout or raise the interval"
        )
    return Config(values, sources)
