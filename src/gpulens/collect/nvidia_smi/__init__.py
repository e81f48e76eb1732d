"""nvidia-smi fallback source: `nvidia-smi -q -x` and `--query-gpu` CSV, fetch + pure parse."""

from gpulens.collect.nvidia_smi.collector import NvidiaSmiCollector, subprocess_runner
from gpulens.collect.nvidia_smi.errors import NvidiaSmiParseError
from gpulens.collect.nvidia_smi.parse_csv import (
    QUERY_FIELDS,
    iter_query_csv,
    parse_query_csv,
    query_command,
)
from gpulens.collect.nvidia_smi.parse_xml import (
    parse_nvsmi_xml,
    parse_nvsmi_xml_document,
    parse_nvsmi_xml_stream,
)

__all__ = [
    "QUERY_FIELDS",
    "NvidiaSmiCollector",
    "NvidiaSmiParseError",
    "iter_query_csv",
    "parse_nvsmi_xml",
    "parse_nvsmi_xml_document",
    "parse_nvsmi_xml_stream",
    "parse_query_csv",
    "query_command",
    "subprocess_runner",
]
