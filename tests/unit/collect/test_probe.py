"""doctor's probes: every check under a deadline; a dcgm URL works only when it serves GPU
series; a URL's password never shows."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.faults import FaultServer, dead_url

from gpulens.collect.dcgm.scrape import public_url
from gpulens.collect.probe import SourceStatus, probe_dcgm, within

T4 = "data/telemetry/cncf_k8s-ai-conformance/v1.35/ericsson-ccd/accelerator_metrics.prom"


def test_a_check_past_its_deadline_is_reported_not_waited_for() -> None:
    release = threading.Event()

    def hangs() -> list[SourceStatus]:
        release.wait(30)
        return [SourceStatus("nvml", True, "late")]

    started = time.monotonic()
    (status,) = within("nvml", 0.2, hangs)
    assert time.monotonic() - started < 1.0
    assert not status.works and status.detail == "no answer within 0.2 s"
    release.set()


def test_a_check_that_raises_is_a_finding() -> None:
    def breaks() -> list[SourceStatus]:
        raise RuntimeError("driver on fire")

    (status,) = within("nvml", 5.0, breaks)
    assert not status.works and "RuntimeError: driver on fire" in status.detail


def test_dcgm_works_only_with_gpu_series(shared: Path) -> None:
    with FaultServer(page=(shared / T4).read_text(encoding="utf-8")) as real:
        ok = probe_dcgm([real.url("ok")])
        garbage = probe_dcgm([real.url("garbage")])
        slow = probe_dcgm([real.url("hang")], timeout_s=0.3)
    assert ok.works and ok.detail == f"{real.url('ok')}: 1 GPU(s)"
    assert not garbage.works and "not a sample line" in garbage.detail
    assert not slow.works and "no complete page within 0.3 s" in slow.detail
    with FaultServer(page="# TYPE up gauge\nup 1\n") as other:
        status = probe_dcgm([other.url("ok")])
    assert not status.works and "no GPU series" in status.detail


def test_a_url_password_never_shows() -> None:
    url = dead_url().replace("http://", "http://admin:hunter2@")
    status = probe_dcgm([url], timeout_s=0.5)
    assert not status.works and "hunter2" not in status.detail
    assert public_url(url) in status.detail
    assert public_url("http://a:b@node1:9400/metrics") == "http://node1:9400/metrics"
