"""Pure parse of `nvidia-smi -q -x` (XML, DTD nvsmi_device_v11, v12 and v13) into Readings.

One `gpu` reading per GPU, one `gpu` reading per MIG device (memory only: nvidia-smi, like
NVML, gives no utilisation, power or clocks per MIG instance), one `process` reading per
`<process_info>`, and one `event` reading per version (driver, CUDA) from
`parse_nvsmi_xml`. Missing values are absent, never 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import BinaryIO

from gpulens.collect.capture_time import nvsmi_xml_time
from gpulens.collect.inputs import CHUNK, DEFAULT_LIMITS, Limits
from gpulens.collect.nvidia_smi import mig_profile
from gpulens.collect.nvidia_smi import values as v
from gpulens.collect.nvidia_smi.errors import NvidiaSmiParseError
from gpulens.collect.nvidia_smi.xmltree import Node, parse_tree, parse_tree_chunks
from gpulens.collect.nvml import parse as nvml_parse
from gpulens.model import FrozenLabels, Kind, Reading

SOURCE_LABEL = "nvidia_smi"
_SKIP = frozenset({"supported_clocks", "accounted_processes", "retired_pages"})
_BLANK = ("supported_clocks",)

Convert = Callable[[str], float | None]


def _q(quantity: str) -> Convert:
    return lambda raw: v.measure(raw, quantity)


_MIB, _W, _C = _q("bytes_mib"), _q("watts"), _q("celsius")
_COUNT = _q("count")

# (path under <gpu>, metric, converter): the first path that gives a value wins per metric, so
# newer DTD names come first and older ones after.
_GPU_FIELDS: tuple[tuple[tuple[str, ...], str, Convert], ...] = (
    (("utilization", "gpu_util"), "gpu_util_ratio", v.ratio),
    (("utilization", "memory_util"), "mem_copy_util_ratio", v.ratio),
    (("utilization", "encoder_util"), "enc_util_ratio", v.ratio),
    (("utilization", "decoder_util"), "dec_util_ratio", v.ratio),
    (("fb_memory_usage", "total"), "memory_total_bytes", _MIB),
    (("fb_memory_usage", "used"), "memory_used_bytes", _MIB),
    (("fb_memory_usage", "free"), "memory_free_bytes", _MIB),
    (("fb_memory_usage", "reserved"), "memory_reserved_bytes", _MIB),
    # v13: average/instant; v12: gpu_power_readings; v11 and older: power_readings.
    (("gpu_power_readings", "average_power_draw"), "power_watts", _W),
    (("gpu_power_readings", "power_draw"), "power_watts", _W),
    (("power_readings", "average_power_draw"), "power_watts", _W),
    (("power_readings", "power_draw"), "power_watts", _W),
    (("gpu_power_readings", "instant_power_draw"), "power_instant_watts", _W),
    (("power_readings", "instant_power_draw"), "power_instant_watts", _W),
    (("gpu_power_readings", "current_power_limit"), "power_limit_watts", _W),
    (("power_readings", "enforced_power_limit"), "power_limit_watts", _W),
    (("power_readings", "current_power_limit"), "power_limit_watts", _W),
    (("power_readings", "power_limit"), "power_limit_watts", _W),
    (("gpu_power_readings", "total_energy_consumption"), "energy_joules", _q("joules_mj")),
    (("power_readings", "total_energy_consumption"), "energy_joules", _q("joules_mj")),
    (("total_energy_consumption",), "energy_joules", _q("joules_mj")),
    (("temperature", "gpu_temp"), "temperature_celsius", _C),
    (("temperature", "memory_temp"), "memory_temperature_celsius", _C),
    (("temperature", "gpu_temp_slow_threshold"), "slowdown_temperature_celsius", _C),
    (("fan_speed",), "fan_speed_ratio", lambda raw: v.ratio(raw, upper=255.0)),
    (("performance_state",), "pstate", v.pstate),
    (("clocks", "sm_clock"), "sm_clock_hertz", v.clock),
    (("clocks", "mem_clock"), "memory_clock_hertz", v.clock),
    (("max_clocks", "sm_clock"), "sm_clock_max_hertz", v.clock),
    (("max_clocks", "mem_clock"), "memory_clock_max_hertz", v.clock),
    (("pci", "tx_util"), "pcie_tx_bytes_per_second", _q("bytes_per_s_kb")),
    (("pci", "rx_util"), "pcie_rx_bytes_per_second", _q("bytes_per_s_kb")),
    (("pci", "replay_counter"), "pcie_replay_total", _COUNT),
    (("remapped_rows", "remapped_row_corr"), "remapped_rows_correctable_total", _COUNT),
    (("remapped_rows", "remapped_row_unc"), "remapped_rows_uncorrectable_total", _COUNT),
    (("remapped_rows", "remapped_row_failure"), "row_remap_failure", v.yes_no),
    (
        ("clocks_event_reasons_counters", "clocks_event_reasons_counters_sw_power_cap"),
        "power_violation_seconds_total",
        _q("seconds_us"),
    ),
)

# ECC volatile counts: v11/v12 split sram/dram, v13 splits sram uncorrectable into parity and
# SEC-DED, pre-v11 had single_bit/double_bit totals. Present parts are summed.
_SBE_PARTS = (("sram_correctable",), ("dram_correctable",))
_DBE_PARTS = (
    ("sram_uncorrectable",),
    ("sram_uncorrectable_parity",),
    ("sram_uncorrectable_secded",),
    ("dram_uncorrectable",),
)
_OLD_SBE, _OLD_DBE = ("single_bit", "total"), ("double_bit", "total")

_MIG_FIELDS: tuple[tuple[tuple[str, ...], str, Convert], ...] = (
    (("fb_memory_usage", "total"), "memory_total_bytes", _MIB),
    (("fb_memory_usage", "used"), "memory_used_bytes", _MIB),
    (("fb_memory_usage", "free"), "memory_free_bytes", _MIB),
    (("fb_memory_usage", "reserved"), "memory_reserved_bytes", _MIB),
)


@dataclass(frozen=True, slots=True)
class XmlDocument:
    """What one `nvidia-smi -q -x` document holds: device readings and the versions."""

    readings: list[Reading]
    versions: dict[str, str] = field(default_factory=dict)


def parse_nvsmi_xml(
    text: str | bytes,
    source: str,
    ts_ns: int,
    host: str,
    limits: Limits = DEFAULT_LIMITS,
    tz: tzinfo | None = None,
) -> list[Reading]:
    """Readings from one `nvidia-smi -q -x` output; version events use the host's labels.

    `source` names where `text` came from (a file or the command) for error messages. With
    `tz`, the output's own `<timestamp>` (local time without a zone, read in `tz`) stamps the
    readings when it has one; `ts_ns` does otherwise. Raises NvidiaSmiParseError, and nothing
    else but InputTooLarge past `limits`, for output it cannot read.
    """
    root = parse_tree(text, source, _SKIP, _BLANK, limits)
    ts = own_time(root, tz) or ts_ns
    return _with_versions(_document(root, source, ts, host), ts, host)


def parse_nvsmi_xml_stream(
    stream: BinaryIO,
    source: str,
    ts_ns: int,
    host: str,
    limits: Limits = DEFAULT_LIMITS,
    tz: tzinfo | None = None,
) -> list[Reading]:
    """`parse_nvsmi_xml` of a binary stream, read and parsed one chunk at a time."""
    chunks = iter(lambda: stream.read(CHUNK), b"")
    root = parse_tree_chunks(chunks, source, _SKIP, limits)
    ts = own_time(root, tz) or ts_ns
    return _with_versions(_document(root, source, ts, host), ts, host)


def own_time(root: Node, tz: tzinfo | None) -> int | None:
    """The document's `<timestamp>` read in `tz` (UTC ns); None without `tz` or a time."""
    node = root.child("timestamp")
    if tz is None or node is None:
        return None
    return nvsmi_xml_time(node.text, tz)


def _with_versions(doc: XmlDocument, ts_ns: int, host: str) -> list[Reading]:
    labels = {"host": host, "source": SOURCE_LABEL}
    return doc.readings + nvml_parse.version_events(ts_ns, doc.versions, None, labels)


def parse_nvsmi_xml_document(
    text: str | bytes, source: str, ts_ns: int, host: str, limits: Limits = DEFAULT_LIMITS
) -> XmlDocument:
    """Like `parse_nvsmi_xml`, but returns the versions apart so a caller can diff them."""
    return _document(parse_tree(text, source, _SKIP, _BLANK, limits), source, ts_ns, host)


def _document(root: Node, source: str, ts_ns: int, host: str) -> XmlDocument:
    if root.tag != "nvidia_smi_log":
        raise NvidiaSmiParseError(
            source, root.line, f"expected <nvidia_smi_log> as the root element, got <{root.tag}>"
        )
    versions: dict[str, str] = {}
    for tag, key in (("driver_version", "driver_version"), ("cuda_version", "cuda_driver_version")):
        node = root.child(tag)
        if node is not None and not v.unavailable(node.text):
            versions[key] = node.text
    readings: list[Reading] = []
    for order, gpu in enumerate(root.all("gpu")):
        _gpu_readings(gpu, order, source, ts_ns, host, readings)
    return XmlDocument(readings, versions)


def _gpu_readings(
    gpu: Node, order: int, source: str, ts_ns: int, host: str, out: list[Reading]
) -> None:
    uuid = _text(gpu, "uuid")
    if uuid is None:
        raise NvidiaSmiParseError(source, gpu.line, "<gpu> has no <uuid>: cannot identify it")
    model = _text(gpu, "product_name") or "unknown"
    # nvidia-smi lists GPUs in NVML index order, so the position is the index NVML and
    # `--query-gpu=index` report; <minor_number> (/dev/nvidiaN) can differ from it.
    labels = {
        "host": host,
        "gpu_uuid": uuid,
        "gpu_index": str(order),
        "gpu_model": model,
        "source": SOURCE_LABEL,
    }
    gpu_labels = FrozenLabels(labels)
    vals = _values(gpu, _GPU_FIELDS, source)
    _ecc(gpu, source, vals)
    _reasons(gpu, source, vals)
    out.append(Reading(Kind.GPU, ts_ns, gpu_labels, vals))

    mig_labels: dict[str, FrozenLabels] = {}
    migs = gpu.child("mig_devices")
    for mig in migs.all("mig_device") if migs is not None else ():
        gi = _text(mig, "gpu_instance_id")
        ci = _text(mig, "compute_instance_id")
        index = _text(mig, "index") or str(len(mig_labels))
        mig_uuid = _text(mig, "uuid") or f"MIG-{uuid}/{gi or index}/{ci or 0}"
        labels_m = dict(labels, gpu_uuid=mig_uuid, parent_uuid=uuid)
        if gi is not None:
            labels_m["mig_instance"] = gi
        mig_vals = _values(mig, _MIG_FIELDS, source)
        profile = (
            _text(mig, "profile")
            or _text(mig, "name")
            or mig_profile.profile(
                model,
                _convert(
                    mig.find("device_attributes", "shared", "multiprocessor_count"), _COUNT, source
                ),
                mig_vals.get("memory_total_bytes"),
                vals.get("memory_total_bytes"),
            )
        )
        if profile is not None:
            labels_m["mig_profile"] = profile
        frozen = FrozenLabels(labels_m)
        mig_labels.setdefault(gi or index, frozen)
        out.append(Reading(Kind.GPU, ts_ns, frozen, mig_vals))

    procs = gpu.child("processes")
    for proc in procs.all("process_info") if procs is not None else ():
        pid = _text(proc, "pid")
        if pid is None or not pid.isdigit():
            raise NvidiaSmiParseError(
                source, proc.line, f"<process_info> has no numeric <pid> (got {pid!r})"
            )
        gi = _text(proc, "gpu_instance_id")
        base = mig_labels.get(gi, gpu_labels) if gi is not None else gpu_labels
        plabels = dict(base, pid=pid)
        name = _text(proc, "process_name")
        if name is not None:
            plabels["process_name"] = name
        pvals: dict[str, float] = {}
        mem = _convert(proc.child("used_memory"), _MIB, source)
        if mem is not None:
            pvals["process_memory_used_bytes"] = mem
        out.append(Reading(Kind.PROCESS, ts_ns, FrozenLabels(plabels), pvals))


def _text(node: Node, tag: str) -> str | None:
    child = node.child(tag)
    if child is None or v.unavailable(child.text):
        return None
    return child.text


def _convert(node: Node | None, convert: Convert, source: str) -> float | None:
    if node is None:
        return None
    try:
        return convert(node.text)
    except v.BadValue as exc:
        raise NvidiaSmiParseError(source, node.line, f"<{node.tag}>: {exc}") from None


def _values(
    parent: Node, fields: tuple[tuple[tuple[str, ...], str, Convert], ...], source: str
) -> dict[str, float]:
    out: dict[str, float] = {}
    for path, metric, convert in fields:
        if metric in out:
            continue
        value = _convert(parent.find(*path), convert, source)
        if value is not None:
            out[metric] = value
    return out


def _ecc(gpu: Node, source: str, out: dict[str, float]) -> None:
    volatile = gpu.find("ecc_errors", "volatile")
    if volatile is None:
        return
    for metric, parts, old in (
        ("ecc_sbe_volatile_total", _SBE_PARTS, _OLD_SBE),
        ("ecc_dbe_volatile_total", _DBE_PARTS, _OLD_DBE),
    ):
        total: float | None = None
        for path in (*parts, old):
            value = _convert(volatile.find(*path), _COUNT, source)
            if value is not None:
                total = value if total is None else total + value
        if total is not None:
            out[metric] = total


def _reasons(gpu: Node, source: str, out: dict[str, float]) -> None:
    """`<clocks_event_reasons>` (v12+) or `<clocks_throttle_reasons>` (v11 and older)."""
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = gpu.child(section)
        if node is None:
            continue
        mask, seen = 0, False
        for child in node.children:
            bit = v.REASON_BITS.get(child.tag.removeprefix(prefix))
            if bit is None:
                continue
            try:
                state = v.active(child.text)
            except v.BadValue as exc:
                raise NvidiaSmiParseError(source, child.line, f"<{child.tag}>: {exc}") from None
            if state is not None:
                seen = True
                mask |= bit if state else 0
        if seen:
            out.update(nvml_parse.clock_event_values(mask))
            return
