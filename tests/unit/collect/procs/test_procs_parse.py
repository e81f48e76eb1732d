"""Pure parsers of /proc contents, engine precedence, pod labels and HPC job files."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeproc import CRI_ID, DOCKER_ID, POD_UID, maps_text, stat_line

from gpulens.collect.procs import engine, parse
from gpulens.collect.procs.hpc import HpcJobMapping, parse_job_file
from gpulens.collect.procs.kube import PodLabelsFile, parse_pod_labels, pod_labels
from gpulens.errors import ConfigError


def test_stat_start_survives_parentheses_and_spaces_in_comm() -> None:
    line = stat_line(42, "my (weird) proc )", 123456)
    assert parse.parse_stat_start(line.encode()) == 123456
    assert parse.parse_stat_start(b"garbage") is None
    assert parse.parse_stat_start(b"1 (x) S 0 0") is None


def test_status_fields() -> None:
    text = "Name:\tpt_main_thread\nPPid:\t7\nUid:\t1000\t1001\t1001\t1001\nNSpid:\t8123\t45\t1\n"
    s = parse.parse_status(text)
    assert (s.name, s.uid, s.ppid, s.nspid) == ("pt_main_thread", 1000, 7, (8123, 45, 1))
    assert parse.parse_status("") == parse.Status()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["/usr/bin/python3", "-u", "/src/train.py", "--lr", "3"], "python3 train.py"),
        (["python", "train.py"], "python train.py"),
        (["python3.11", "-X", "dev", "-W", "ignore", "run.py"], "python3.11 run.py"),
        (["python", "-m", "torch.distributed.run", "x.py"], "python -m torch.distributed.run"),
        (["python", "-c", "import x"], "python -c"),
        (["/opt/tritonserver/bin/tritonserver", "--x"], "tritonserver"),
        (["/bin/bash", "-lc", "run.sh"], "bash run.sh"),
        ([], None),
    ],
)
def test_process_name(args: list[str], expected: str | None) -> None:
    assert parse.process_name(args) == expected


def test_process_name_falls_back_to_comm() -> None:
    assert parse.process_name([], "kworker/0:1") == "kworker/0:1"


def test_environ_and_label_overrides() -> None:
    data = b"A=1\0GPULENS_LABELS=engine=x, team = t ,nope=1,=v,junk\0SLURM_JOB_ID=9\0B=x=y\0"
    env = parse.parse_environ(data)
    assert env["B"] == "x=y" and env["SLURM_JOB_ID"] == "9"
    assert parse.parse_environ(data, ["A"]) == {"A": "1"}
    labels, ignored = parse.parse_label_overrides(env["GPULENS_LABELS"])
    assert labels == {"engine": "x", "team": "t"}
    assert ignored == ["nope=1", "=v", "junk"]
    explicit, slurm = parse.environ_labels(env)
    assert explicit == labels and slurm == {"job_id": "9"}


@pytest.mark.parametrize(
    ("text", "container", "runtime", "pod", "job"),
    [
        (f"12:pids:/docker/{DOCKER_ID}\n", DOCKER_ID, "docker", None, None),
        (f"0::/system.slice/docker-{DOCKER_ID}.scope\n", DOCKER_ID, "docker", None, None),
        (f"0::/system.slice/crio-{CRI_ID}.scope\n", CRI_ID, "cri-o", None, None),
        (f"0::/system.slice/crio-conmon-{CRI_ID}.scope\n", None, None, None, None),
        (f"0::/user.slice/libpod-{CRI_ID}.scope\n", CRI_ID, "podman", None, None),
        (f"0::/docker/{DOCKER_ID}/docker/{CRI_ID}\n", CRI_ID, "docker", None, None),
        (
            "0::/kubepods.slice/kubepods-pod" + POD_UID.replace("-", "_") + ".slice/"
            f"cri-containerd-{CRI_ID}.scope\n",
            CRI_ID, "containerd", POD_UID, None,
        ),
        ("0::/system.slice/slurmstepd.scope/job_12/step_extern/user/task_0\n",
         None, None, None, "12"),
        ("0::/user.slice/user-1000.slice/session-2.scope\n", None, None, None, None),
        ("0::/\n", None, None, None, None),
    ],
)  # fmt: skip
def test_cgroup_variants(
    text: str, container: str | None, runtime: str | None, pod: str | None, job: str | None
) -> None:
    facts = parse.parse_cgroup(text)
    assert (facts.container_id, facts.runtime, facts.pod_uid, facts.job_id) == (
        container,
        runtime,
        pod,
        job,
    )


def test_cgroup_hybrid_prefers_unified_line() -> None:
    text = f"1:name=systemd:/user.slice\n0::/system.slice/docker-{DOCKER_ID}.scope\n"
    assert parse.cgroup_paths(text)[0] == f"/system.slice/docker-{DOCKER_ID}.scope"


def test_maps_scan_finds_marker_split_across_chunks() -> None:
    data = maps_text(["/usr/lib/libtorch_cuda.so"]).encode()
    cut = data.index(b"libtorch_cuda") + 5
    assert engine.from_maps([data[:cut], data[cut:]])[0] == "pytorch"


def test_maps_scan_stops_early_at_the_best_possible_answer() -> None:
    head = maps_text(["/opt/lib/libtritonserver.so"]).encode()
    consumed: list[int] = []

    def chunks() -> object:
        for i in range(1000):
            consumed.append(i)
            yield head if i == 0 else b"x" * 100 + b"\n"

    found, scanned = engine.from_maps(chunks())  # type: ignore[arg-type]
    assert found == "triton-server" and consumed == [0] and scanned == len(head)


def test_engine_precedence_is_total_and_documented() -> None:
    assert engine.rank("vllm") < engine.rank("pytorch") < engine.rank("tensorflow")
    assert engine.rank("torch-tensorrt") < engine.rank("tensorrt") < engine.rank("pytorch")
    assert engine.rank("onnxruntime-trt") < engine.rank("tensorrt")
    assert engine.rank("nonsense") == len(engine.ENGINES)
    for name in engine.ENGINES:
        assert f"| {name} |" in (engine.__doc__ or "")


def test_detect_with_unreadable_maps() -> None:
    assert engine.detect(["python", "x.py"], None) == ("unknown", "none")
    assert engine.detect(["vllm", "serve"], None) == ("vllm", "cmdline")


def test_pod_labels_parse_and_errors(tmp_path: Path) -> None:
    table = parse_pod_labels('{"ABC_D": {"pod": "p", "gpulens.io/engine": "sglang"}, "x": 1}')
    assert list(table) == ["abc-d"]
    assert pod_labels(table["abc-d"], None) == {"pod": "p", "engine": "sglang"}
    with pytest.raises(ConfigError, match=r"pods\.json.*not valid JSON"):
        parse_pod_labels("{", "pods.json")
    with pytest.raises(ConfigError, match="JSON list"):
        parse_pod_labels("[]", "pods.json")
    broken = tmp_path / "pods.json"
    broken.write_text("{nope")
    with pytest.raises(ConfigError, match=str(broken)):
        PodLabelsFile(broken)


def test_pod_labels_file_missing_at_start_then_appears(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    pods = PodLabelsFile(path)
    assert pods.lookup(POD_UID, None) == {} and pods.generation == 0
    path.write_text(f'{{"{POD_UID}": {{"namespace": "ns"}}}}')
    pods.refresh()
    assert pods.lookup(POD_UID, None) == {"namespace": "ns"} and pods.generation == 1
    path.write_text("{broken")
    path.touch()
    import os

    os.utime(path, ns=(1, 1))
    pods.refresh()
    assert pods.lookup(POD_UID, None) == {"namespace": "ns"} and pods.errors == 1


def test_hpc_job_file_and_config_error(tmp_path: Path) -> None:
    assert parse_job_file("12\n\n# comment\n13 # trailing\n12\n") == ["12", "13"]
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        HpcJobMapping(not_a_dir)
    mapping = HpcJobMapping(tmp_path / "later")
    assert mapping.jobs_for_gpu("0") == [] and mapping.all_jobs() == {}
