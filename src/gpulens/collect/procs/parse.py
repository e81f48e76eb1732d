"""Pure parsers for /proc/<pid> files: status, stat, cmdline, environ and cgroup.

Each takes the file's bytes (or text) and returns plain values; nothing here touches the file
system, so every case is tested with captured or hand-written file contents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpulens.model import ATTRIBUTION_LABELS

# Interpreters whose first non-option argument (the script) says more than the interpreter.
_INTERPRETERS = re.compile(
    r"(python|pypy|ruby|perl|node|bash|sh|dash|zsh|Rscript|julia)([0-9.]*)(?:-dbg)?$"
)
# Python options that consume the next argument.
_PY_VALUE_OPTIONS = frozenset({"-W", "-X", "-Q", "--check-hash-based-pycs"})
_MAX_NAME = 80

_ENV_LABELS = "GPULENS_LABELS"
# The job a process declares itself (gpulens.torch takes its job from it too).
ENV_JOB = "GPULENS_JOB"


@dataclass(frozen=True, slots=True)
class Status:
    """The facts gpulens uses from /proc/<pid>/status."""

    name: str | None = None
    uid: int | None = None
    ppid: int | None = None
    nspid: tuple[int, ...] = ()


def parse_status(text: str) -> Status:
    """`Name`, real `Uid`, `PPid` and the `NSpid` chain (outermost namespace first)."""
    name: str | None = None
    uid: int | None = None
    ppid: int | None = None
    nspid: tuple[int, ...] = ()
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "Name":
            name = rest.strip() or None
        elif key == "Uid":
            fields = rest.split()
            uid = int(fields[0]) if fields and fields[0].isdigit() else None
        elif key == "PPid":
            value = rest.strip()
            ppid = int(value) if value.isdigit() else None
        elif key == "NSpid":
            fields = rest.split()
            if fields and all(f.isdigit() for f in fields):
                nspid = tuple(int(f) for f in fields)
    return Status(name, uid, ppid, nspid)


def parse_stat_start(data: bytes) -> int | None:
    """Field 22 of /proc/<pid>/stat: start time in clock ticks since boot.

    The command name (field 2) may contain spaces and parentheses, so fields are counted after
    the last ')'. None when the content is not a stat line.
    """
    close = data.rfind(b")")
    if close < 0:
        return None
    fields = data[close + 1 :].split()
    # fields[0] is field 3 (state), so field 22 is fields[19].
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def parse_cmdline(data: bytes) -> list[str]:
    """The NUL-separated argument vector (a process that rewrote its title may use spaces)."""
    text = data.decode("utf-8", "replace")
    args = [a for a in text.split("\0") if a]
    if len(args) == 1 and " " in args[0] and not args[0].startswith("/"):
        # setproctitle-style "VLLM::EngineCore" or "nginx: worker process" titles.
        return args[0].split()
    return args


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def process_name(args: list[str], comm: str | None = None) -> str | None:
    """A short process name: executable basename, plus the script for interpreters.

    ["/usr/bin/python3", "-u", "/src/train.py", "--lr", "3e-4"] → "python3 train.py";
    ["python", "-m", "vllm.entrypoints.openai.api_server"] → "python -m vllm.entrypoints...".
    Falls back to `comm` (status Name) when the command line is empty (kernel threads, zombies).
    """
    if not args:
        return comm
    exe = _basename(args[0])
    name = exe
    if _INTERPRETERS.match(exe):
        rest = iter(args[1:])
        for arg in rest:
            if arg in ("-m", "-c"):
                module = next(rest, "") if arg == "-m" else ""
                name = f"{exe} {arg} {module}".rstrip()
                break
            if arg in _PY_VALUE_OPTIONS:
                next(rest, None)
                continue
            if arg.startswith("-"):
                continue
            name = f"{exe} {_basename(arg)}"
            break
    return name[:_MAX_NAME]


def parse_environ(data: bytes, keys: Iterable[str] | None = None) -> dict[str, str]:
    """NUL-separated KEY=VALUE pairs; only `keys` when given (environments can be large)."""
    wanted = frozenset(keys) if keys is not None else None
    out: dict[str, str] = {}
    for item in data.decode("utf-8", "replace").split("\0"):
        key, sep, value = item.partition("=")
        if sep and key and (wanted is None or key in wanted):
            out[key] = value
    return out


def parse_label_overrides(text: str) -> tuple[dict[str, str], list[str]]:
    """`GPULENS_LABELS="k=v,k2=v2"` → (labels among ATTRIBUTION_LABELS, ignored items)."""
    labels: dict[str, str] = {}
    ignored: list[str] = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not item.strip():
            continue
        if sep and key in ATTRIBUTION_LABELS and value:
            labels[key] = value
        else:
            ignored.append(item.strip())
    return labels, ignored


ENVIRON_KEYS: tuple[str, ...] = (
    _ENV_LABELS,
    ENV_JOB,
    "SLURM_JOB_ID",
    "SLURM_JOB_USER",
    "SLURM_JOB_ACCOUNT",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
)


def environ_labels(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(explicit GPULENS_LABELS overrides, Slurm facts as labels) from a parsed environment.

    `GPULENS_JOB` → job_id among the explicit labels, unless `GPULENS_LABELS` names a job_id.
    Slurm: `SLURM_JOB_ID` → job_id (an array task is "<array job>_<task>" as Slurm prints it),
    `SLURM_JOB_USER` → user, `SLURM_JOB_ACCOUNT` → project.
    """
    explicit = parse_label_overrides(env[_ENV_LABELS])[0] if _ENV_LABELS in env else {}
    declared = env.get(ENV_JOB, "").strip()
    if declared and "job_id" not in explicit:
        explicit["job_id"] = declared
    slurm: dict[str, str] = {}
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        slurm["job_id"] = f"{array}_{task}"
    elif env.get("SLURM_JOB_ID"):
        slurm["job_id"] = env["SLURM_JOB_ID"]
    if env.get("SLURM_JOB_USER"):
        slurm["user"] = env["SLURM_JOB_USER"]
    if env.get("SLURM_JOB_ACCOUNT"):
        slurm["project"] = env["SLURM_JOB_ACCOUNT"]
    return explicit, slurm


# -- cgroups --------------------------------------------------------------------------------------

_HEX64 = r"[0-9a-f]{64}"
_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# (runtime, pattern with one group = full container id); the first that matches wins per path.
_CONTAINER_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("containerd", re.compile(rf"cri-containerd-({_HEX64})\.scope")),
    ("cri-o", re.compile(rf"crio-({_HEX64})\.scope")),
    ("docker", re.compile(rf"docker-({_HEX64})\.scope")),
    ("podman", re.compile(rf"libpod-({_HEX64})\.scope")),
    ("docker", re.compile(rf"/docker/({_HEX64})(?=/|$)")),
    # kubepods cgroupfs driver: /kubepods/<qos>/pod<uid>/<container id>
    ("cri", re.compile(rf"/pod{_UUID}/({_HEX64})(?=/|$)")),
    ("unknown", re.compile(rf"(?:^|/)({_HEX64})(?:\.scope)?(?=/|$)")),
)
_POD_UID = re.compile(rf"kubepods.*?pod({_UUID})(?:\.slice)?(?:/|$)")
_SLURM_JOB = re.compile(r"(?:^|/)job_(\d+)(?:/|$)")
_SLURM_STEP = re.compile(r"(?:^|/)step_([A-Za-z0-9_]+)(?:/|$)")
_SLURM_UID = re.compile(r"(?:^|/)uid_(\d+)(?:/|$)")


@dataclass(frozen=True, slots=True)
class CgroupFacts:
    """What a process's cgroup paths say about where it runs."""

    container_id: str | None = None
    runtime: str | None = None
    pod_uid: str | None = None
    job_id: str | None = None
    job_step: str | None = None
    job_uid: str | None = None
    paths: tuple[str, ...] = ()

    @property
    def container_short(self) -> str | None:
        """The 12-hex-digit short id `docker ps` shows."""
        return self.container_id[:12] if self.container_id else None


def cgroup_paths(text: str) -> list[str]:
    """The distinct cgroup paths of /proc/<pid>/cgroup (v1 `N:ctrl:/path`, v2 `0::/path`),
    the v2 unified path first."""
    unified: list[str] = []
    legacy: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        target = unified if parts[0] == "0" and parts[1] == "" else legacy
        if parts[2] not in unified and parts[2] not in legacy:
            target.append(parts[2])
    return unified + legacy


def parse_cgroup(text: str) -> CgroupFacts:
    """Container id and runtime, Kubernetes pod UID and Slurm job/step from cgroup paths.

    Covers Docker (cgroupfs `/docker/<id>`, systemd `docker-<id>.scope`), containerd and CRI-O
    (`cri-containerd-<id>.scope`, `crio-<id>.scope`), Podman (`libpod-<id>.scope`), kubelet
    pods with either driver (`kubepods/<qos>/pod<uid>/<id>`,
    `kubepods-<qos>-pod<uid_with_underscores>.slice`) and Slurm (v1
    `/slurm/uid_<u>/job_<id>/step_<s>`, v2 `.../slurmstepd.scope/job_<id>/step_<s>`). When
    containers nest, the innermost id (last in the path) is kept.
    """
    paths = cgroup_paths(text)
    container = runtime = pod = job = step = job_uid = None
    for path in paths:
        if container is None:
            for kind, pattern in _CONTAINER_PATTERNS:
                found = pattern.findall(path)
                if found:
                    container, runtime = found[-1], kind
                    break
        if pod is None and (m := _POD_UID.search(path)):
            pod = m.group(1).replace("_", "-")
        if job is None and (m := _SLURM_JOB.search(path)):
            job = m.group(1)
            s, u = _SLURM_STEP.search(path), _SLURM_UID.search(path)
            step = s.group(1) if s else None
            job_uid = u.group(1) if u else None
    if pod is not None and runtime == "unknown":
        runtime = "cri"
    return CgroupFacts(container, runtime, pod, job, step, job_uid, tuple(paths))
