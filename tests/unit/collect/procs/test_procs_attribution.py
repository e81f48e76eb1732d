"""ProcAttribution on fake /proc trees: one case per runtime, override, engine and failure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fakeproc import CRI_ID, DOCKER_ID, POD_UID, DenyingProcFS, FakeProc

from gpulens.clock import FakeClock
from gpulens.collect.procs.attribution import ProcAttribution
from gpulens.collect.procs.identity import ProcessIdentity

USERS = {1000: "alice", 1001: "bob", 0: "root"}


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def resolver(proc: FakeProc, **kw: object) -> ProcAttribution:
    return ProcAttribution(proc.root, user_name=USERS.get, **kw)  # type: ignore[arg-type]


def test_plain_process_user_name_and_protocol(proc: FakeProc) -> None:
    proc.add(100, cmdline=["/usr/bin/python3", "-u", "/src/train.py", "--lr", "3e-4"])
    r = resolver(proc)
    assert isinstance(r, ProcessIdentity)
    assert r.sees_host_pids
    labels = r.identify(100)
    assert labels["user"] == "alice"
    assert labels["process_name"] == "python3 train.py"
    assert labels["engine"] == "unknown"
    assert "container" not in labels and "job_id" not in labels


def test_unknown_uid_falls_back_to_the_number(proc: FakeProc) -> None:
    proc.add(100, uid=4321)
    assert resolver(proc).identify(100)["user"] == "4321"


def test_docker_cgroup_v1(proc: FakeProc) -> None:
    cgroup = "\n".join(
        f"{i}:{c}:/docker/{DOCKER_ID}" for i, c in enumerate(["devices", "memory", "pids"], 2)
    )
    proc.add(100, cgroup=cgroup + "\n1:name=systemd:/docker/" + DOCKER_ID)
    facts = resolver(proc).facts(100)
    assert facts is not None
    assert facts.labels["container"] == DOCKER_ID[:12]
    assert facts.cgroup.runtime == "docker" and facts.cgroup.container_id == DOCKER_ID


def test_docker_cgroup_v2_scope(proc: FakeProc) -> None:
    proc.add(100, cgroup=f"0::/system.slice/docker-{DOCKER_ID}.scope")
    r = resolver(proc)
    assert r.identify(100)["container"] == DOCKER_ID[:12]
    assert r.facts(100).cgroup.runtime == "docker"  # type: ignore[union-attr]


def test_containerd_scope(proc: FakeProc) -> None:
    proc.add(100, cgroup=f"0::/system.slice/cri-containerd-{CRI_ID}.scope")
    facts = resolver(proc).facts(100)
    assert facts is not None and facts.cgroup.runtime == "containerd"
    assert facts.labels["container"] == CRI_ID[:12]


def test_kubernetes_burstable_pod_slice(proc: FakeProc) -> None:
    uid = POD_UID.replace("-", "_")
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid}.slice/cri-containerd-{CRI_ID}.scope"
    )
    proc.add(100, cgroup=f"0::{path}")
    labels = resolver(proc).identify(100)
    assert labels["pod_uid"] == POD_UID
    assert labels["container"] == CRI_ID[:12]
    assert "pod" not in labels  # names need the pod labels file


def test_kubernetes_cgroupfs_v1_pod(proc: FakeProc) -> None:
    proc.add(100, cgroup=f"5:memory:/kubepods/besteffort/pod{POD_UID}/{CRI_ID}")
    facts = resolver(proc).facts(100)
    assert facts is not None and facts.cgroup.pod_uid == POD_UID
    assert facts.cgroup.container_id == CRI_ID and facts.cgroup.runtime == "cri"


def test_pod_labels_file_names_and_engine(proc: FakeProc, tmp_path: Path) -> None:
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{CRI_ID}.scope"
    )
    proc.add(100, cgroup=f"0::{path}", maps=["/usr/lib/libtorch_cuda.so"])
    pods = tmp_path / "pods.json"
    record = {
        "pod": "llm-0",
        "namespace": "serving",
        "containers": {CRI_ID[:12]: "server"},
        "labels": {"inference_engine": "vllm", "gpulens.io/team": "search", "app": "llm"},
    }
    pods.write_text(json.dumps({POD_UID.upper(): record}))
    facts = resolver(proc, pod_labels_file=pods).facts(100)
    assert facts is not None
    labels = facts.labels
    assert (labels["pod"], labels["namespace"], labels["container"]) == (
        "llm-0",
        "serving",
        "server",
    )
    assert labels["engine"] == "vllm" and facts.engine_evidence == "pod"
    assert labels["team"] == "search" and "app" not in labels


def test_pod_labels_file_reload_after_refresh_interval(proc: FakeProc, tmp_path: Path) -> None:
    proc.add(100, cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CRI_ID}")
    pods = tmp_path / "pods.json"
    pods.write_text("{}")
    clock = FakeClock(10**18)
    r = resolver(proc, pod_labels_file=pods, clock=clock, pod_refresh_s=5.0)
    assert "pod" not in r.identify(100)
    pods.write_text(json.dumps({POD_UID: {"pod": "late-0", "namespace": "ns"}}))
    os.utime(pods, ns=(2 * 10**18, 2 * 10**18))
    assert "pod" not in r.identify(100)  # not re-checked before the interval
    clock.advance(6 * 10**9)
    assert r.identify(100)["pod"] == "late-0"


def test_slurm_cgroup_v1_and_environ(proc: FakeProc) -> None:
    env = {"SLURM_JOB_ID": "777", "SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "physics"}
    proc.add(100, cgroup="4:memory:/slurm/uid_1000/job_777/step_0/task_0", environ=env)
    facts = resolver(proc).facts(100)
    assert facts is not None
    assert facts.labels["job_id"] == "777" and facts.labels["project"] == "physics"
    assert facts.cgroup.job_step == "0" and facts.cgroup.job_uid == "1000"


def test_slurm_cgroup_v2_without_environ_job(proc: FakeProc) -> None:
    proc.add(100, cgroup="0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0")
    labels = resolver(proc).identify(100)
    assert labels["job_id"] == "4242"


def test_slurm_environ_only_and_array_job(proc: FakeProc) -> None:
    env = {"SLURM_JOB_ID": "900", "SLURM_ARRAY_JOB_ID": "899", "SLURM_ARRAY_TASK_ID": "3"}
    proc.add(100, environ=env)
    assert resolver(proc).identify(100)["job_id"] == "899_3"


def test_gpulens_labels_override_everything(proc: FakeProc, tmp_path: Path) -> None:
    env = {
        "GPULENS_LABELS": "engine=my-engine, team=vision,project=p1,bogus=x,user=svc",
        "SLURM_JOB_ID": "5",
    }
    proc.add(100, cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CRI_ID}", environ=env)
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({POD_UID: {"pod": "p", "gpulens.io/team": "search"}}))
    facts = resolver(proc, pod_labels_file=pods).facts(100)
    assert facts is not None
    labels = facts.labels
    assert labels["engine"] == "my-engine" and facts.engine_evidence == "GPULENS_LABELS"
    assert labels["team"] == "vision"  # explicit beats the pod label
    assert labels["user"] == "svc" and labels["project"] == "p1"
    assert labels["pod"] == "p" and "bogus" not in labels


@pytest.mark.parametrize(
    ("libs", "expected"),
    [
        (["/usr/lib/x86_64-linux-gnu/libnvinfer.so.10.3.0"], "tensorrt"),
        (["/site/torch/lib/libtorch_cuda.so", "/site/torch_tensorrt/lib/libtorchtrt.so"],
         "torch-tensorrt"),
        (["/site/torch/lib/libtorch_cuda.so", "/site/torch/lib/libc10.so"], "pytorch"),
        (["/site/onnxruntime/capi/libonnxruntime_providers_cuda.so"], "onnxruntime"),
        (["/site/onnxruntime/capi/libonnxruntime_providers_cuda.so",
          "/site/onnxruntime/capi/libonnxruntime_providers_tensorrt.so",
          "/usr/lib/libnvinfer.so.10"], "onnxruntime-trt"),
        (["/site/tensorflow/libtensorflow_framework.so.2"], "tensorflow"),
        (["/site/tensorflow/python/_pywrap_tensorflow_internal.so"], "tensorflow"),
        (["/site/jaxlib/xla_extension.so", "/site/torch/lib/libtorch_cuda.so"], "jax"),
        (["/opt/tritonserver/lib/libtritonserver.so", "/usr/lib/libnvinfer.so.10"],
         "triton-server"),
        (["/usr/lib/libcudart.so.12"], "unknown"),
    ],
)  # fmt: skip
def test_engine_from_maps(proc: FakeProc, libs: list[str], expected: str) -> None:
    proc.add(100, maps=libs)
    r = resolver(proc)
    assert r.identify(100)["engine"] == expected
    assert r.facts(100).engine_evidence == ("none" if expected == "unknown" else "maps")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
        (["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "meta/llama"], "vllm"),
        (["VLLM::EngineCore"], "vllm"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
        (["/opt/tritonserver/bin/tritonserver", "--model-repository=/models"], "triton-server"),
        (["text-generation-launcher", "--model-id", "m"], "tgi"),
    ],
)
def test_engine_from_cmdline_beats_frameworks_in_maps(
    proc: FakeProc, cmdline: list[str], expected: str
) -> None:
    proc.add(100, cmdline=cmdline, maps=["/site/torch/lib/libtorch_cuda.so"])
    r = resolver(proc)
    assert r.identify(100)["engine"] == expected
    assert r.counters["maps_bytes"] == 0  # the scan cannot improve on a serving engine


def test_process_title_with_spaces_is_split(proc: FakeProc) -> None:
    proc.add(100, cmdline=["VLLM::Worker_TP0 extra"])
    assert resolver(proc).identify(100)["process_name"] == "VLLM::Worker_TP0"


def test_cache_hit_reads_only_stat(proc: FakeProc) -> None:
    proc.add(100, maps=["/site/torch/lib/libtorch_cuda.so"])
    r = resolver(proc)
    first = r.identify(100)
    (proc.root / "100" / "maps").unlink()
    (proc.root / "100" / "cgroup").write_text(f"0::/docker/{DOCKER_ID}\n")
    assert r.identify(100) == first
    assert r.counters["hits"] == 1 and r.counters["misses"] == 1


def test_pid_reuse_gives_a_new_identity(proc: FakeProc) -> None:
    proc.add(100, uid=1000, cmdline=["python3", "train.py"], start=5000)
    r = resolver(proc)
    assert r.identify(100)["user"] == "alice"
    proc.restart(100, start=9000, uid=1001, cmdline=["python3", "serve.py"])
    labels = r.identify(100)
    assert labels["user"] == "bob" and labels["process_name"] == "python3 serve.py"
    assert r.counters["reused"] == 1


def test_vanished_pid_is_unknown(proc: FakeProc) -> None:
    proc.add(100)
    r = resolver(proc)
    assert r.identify(100)
    proc.remove(100)
    assert r.identify(100) == {}
    assert r.identify(555) == {}
    assert r.counters["vanished"] == 2


def test_unreadable_environ_and_maps_are_absent_and_counted(proc: FakeProc) -> None:
    proc.add(100, environ={"SLURM_JOB_ID": "1"}, maps=["/usr/lib/libnvinfer.so"])
    r = ProcAttribution(
        proc.root, user_name=USERS.get, procfs=DenyingProcFS(proc.root, ["environ", "maps"])
    )
    facts = r.facts(100)
    assert facts is not None
    assert "job_id" not in facts.labels and "engine" not in facts.labels
    assert facts.labels["user"] == "alice"
    assert facts.engine_evidence == "unreadable"
    assert set(facts.denied) == {"environ", "maps"}
    assert r.denied == {"environ": 1, "maps": 1}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_environ_by_file_mode(proc: FakeProc) -> None:
    d = proc.add(100, environ={"SLURM_JOB_ID": "1"})
    (d / "environ").chmod(0)
    r = resolver(proc)
    assert "job_id" not in r.identify(100)
    assert r.denied["environ"] == 1


def test_container_without_host_pid_namespace_attributes_nothing(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", host_ns=False, self_cgroup=f"0::/docker/{DOCKER_ID}")
    proc.add(100)  # a container-local PID 100 that is NOT the host PID NVML means
    r = resolver(proc)
    assert not r.sees_host_pids
    assert "hostPID" in r.namespace.reason
    assert r.namespace.self_container == DOCKER_ID
    assert r.identify(100) == {}


def test_host_proc_mounted_into_a_container_is_trusted(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", self_cgroup=f"0::/docker/{DOCKER_ID}")
    proc.add("self", name="gpulens", cmdline=["gpulens"], nspid=[31337, 7],
             cgroup=f"0::/docker/{DOCKER_ID}")  # fmt: skip
    proc.add(100, nspid=[100, 1])
    r = resolver(proc)
    assert r.sees_host_pids and r.namespace.self_nspid == (31337, 7)
    facts = r.facts(100)
    assert facts is not None and facts.container_pid == 1


def test_assume_host_pids_overrides_detection(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc", host_ns=False)
    proc.add(100)
    r = resolver(proc, assume_host_pids=True)
    assert r.sees_host_pids and r.identify(100)["user"] == "alice"


def test_identify_never_raises(proc: FakeProc) -> None:
    proc.add(100)
    (proc.root / "100" / "cgroup").unlink()
    (proc.root / "100" / "cgroup").mkdir()  # reading a directory: EISDIR
    (proc.root / "100" / "status").write_bytes(b"\xff\xfe garbage")
    labels = resolver(proc).identify(100)
    assert "container" not in labels and "user" not in labels
    assert labels["process_name"] == "python3 train.py"


def test_hpc_job_mapping_dir(proc: FakeProc, tmp_path: Path) -> None:
    mapping = tmp_path / "hpc"
    mapping.mkdir()
    (mapping / "0").write_text("1001\n1002\n")
    (mapping / "1.1").write_text("2001\n")
    (mapping / "1.2").write_text("2002\n\n")
    r = resolver(proc, hpc_job_mapping_dir=mapping)
    assert r.jobs_for_gpu("0") == ["1001", "1002"]
    assert r.jobs_for_gpu("1") == ["2001", "2002"]
    assert r.jobs_for_gpu("1.2") == ["2002"]
    assert r.jobs_for_gpu("3") == []
    assert resolver(proc).jobs_for_gpu("0") == []


def test_real_proc_knows_this_test_process() -> None:
    r = ProcAttribution()
    if not r.sees_host_pids:
        pytest.skip(f"not in the host PID namespace: {r.namespace.reason}")
    labels = r.identify(os.getpid())
    assert labels["user"] and labels["process_name"]
    assert "python" in labels["process_name"] or "pytest" in labels["process_name"]
    assert r.identify(os.getpid()) == labels and r.counters["hits"] == 1


def test_pid_reused_while_resolving_is_not_trusted(proc: FakeProc) -> None:
    from typing import BinaryIO

    from gpulens.collect.procs.procfs import ProcFS

    class Racing(ProcFS):
        """The process exits and its PID is reused between reading stat and cmdline."""

        def open(self, pid: int | str, name: str) -> BinaryIO:
            if name == "cmdline" and str(pid) == "100":
                proc.restart(100, start=7777, uid=1001, cmdline=["python3", "other.py"])
            return super().open(pid, name)

    proc.add(100, start=5000)
    r = ProcAttribution(proc.root, user_name=USERS.get, procfs=Racing(proc.root))
    assert r.identify(100) == {}
    assert r.counters["raced"] == 1
