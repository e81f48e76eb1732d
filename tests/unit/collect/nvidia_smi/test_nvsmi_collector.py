"""NvidiaSmiCollector with an injected runner replaying real captures, and its failure modes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nvsmi_captures import CAPTURE_DIR, CAPTURES, XML_DIR, query_gpu_csv

from gpulens.collect.base import Collector
from gpulens.collect.nvidia_smi import NvidiaSmiCollector, NvidiaSmiParseError, subprocess_runner
from gpulens.errors import CollectError, SourceUnavailable
from gpulens.model import Kind


class Replay:
    """A runner that returns canned outputs in turn and records the argv it got."""

    def __init__(self, *outputs: str) -> None:
        self.outputs = list(outputs)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(argv)
        return self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]


def test_is_a_collector() -> None:
    collector = NvidiaSmiCollector("h", runner=Replay(""))
    assert isinstance(collector, Collector)
    assert collector.name == "nvidia_smi"


def test_xml_mode_and_version_events_only_on_change(shared: Path) -> None:
    t4 = (shared / XML_DIR / "tesla-t4.xml").read_text("utf-8")
    newer = t4.replace("515.105.01</driver_version>", "515.200.01</driver_version>")
    runner = Replay(t4, t4, newer)
    collector = NvidiaSmiCollector("node1", runner=runner)
    first = collector.collect(10)
    assert runner.calls[0] == ["nvidia-smi", "-q", "-x"]
    assert {r.labels["event"] for r in first if r.kind is Kind.EVENT} == {
        "driver_version",
        "cuda_driver_version",
    }
    second = collector.collect(20)
    assert not [r for r in second if r.kind is Kind.EVENT]
    assert [r.ts for r in second] == [20, 20, 20]  # gpu + 2 processes
    third = collector.collect(30)
    (change,) = [r for r in third if r.kind is Kind.EVENT]
    assert change.labels["message"] == "NVIDIA driver changed from 515.105.01 to 515.200.01"


def test_csv_mode(shared: Path) -> None:
    text = query_gpu_csv((shared / CAPTURE_DIR / CAPTURES["h100"]).read_text("utf-8"), "load")
    runner = Replay(text)
    collector = NvidiaSmiCollector("h", runner=runner, binary="/opt/nvidia-smi", mode="csv")
    (reading,) = collector.collect(5)
    assert runner.calls[0][0] == "/opt/nvidia-smi"
    assert runner.calls[0][-1] == "--format=csv,nounits"
    assert reading.values["power_watts"] == pytest.approx(631.95)


def test_unparseable_output_names_the_command_and_line() -> None:
    collector = NvidiaSmiCollector("h", runner=Replay("<nvidia_smi_log>\n<gpu>"))
    with pytest.raises(NvidiaSmiParseError) as info:
        collector.collect(1)
    assert isinstance(info.value, CollectError)
    assert "nvidia-smi -q -x" in str(info.value)
    assert info.value.line == 2


def test_runner_failures_become_gpulens_errors() -> None:
    def missing(argv: list[str]) -> str:
        raise FileNotFoundError(argv[0])

    def broken(argv: list[str]) -> str:
        raise RuntimeError("boom")

    with pytest.raises(SourceUnavailable, match="install"):
        NvidiaSmiCollector("h", runner=missing).collect(1)
    with pytest.raises(CollectError, match="boom"):
        NvidiaSmiCollector("h", runner=broken).collect(1)


def test_missing_binary_is_source_unavailable() -> None:
    with pytest.raises(SourceUnavailable, match="nvidia-utils"):
        NvidiaSmiCollector("h", binary="/nonexistent/nvidia-smi-gpulens")


def test_closed_collector_refuses() -> None:
    collector = NvidiaSmiCollector("h", runner=Replay(""))
    collector.close()
    with pytest.raises(CollectError, match="closed"):
        collector.collect(1)


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        NvidiaSmiCollector("h", runner=Replay(""), mode="json")  # type: ignore[arg-type]


# The real subprocess runner, driven with the Python interpreter standing in for nvidia-smi.
def test_subprocess_runner_returns_stdout() -> None:
    run = subprocess_runner(5.0)
    assert run([sys.executable, "-c", "print('<x/>')"]) == "<x/>\n"


def test_subprocess_runner_nonzero_exit_names_command_and_first_line() -> None:
    run = subprocess_runner(5.0)
    code = "import sys; sys.stderr.write('NVIDIA-SMI has failed\\nsecond'+'_line\\n'); sys.exit(9)"
    with pytest.raises(CollectError) as info:
        run([sys.executable, "-c", code])
    assert "status 9" in str(info.value)
    assert "NVIDIA-SMI has failed" in str(info.value)
    assert "second_line" not in str(info.value)


def test_subprocess_runner_timeout_and_missing() -> None:
    with pytest.raises(CollectError, match="did not finish"):
        subprocess_runner(0.2)([sys.executable, "-c", "import time; time.sleep(5)"])
    with pytest.raises(SourceUnavailable):
        subprocess_runner(1.0)(["/nonexistent/nvidia-smi-gpulens", "-q"])
