"""Inference/training engine detection from the command line and the loaded shared libraries.

Precedence (highest first) — an engine that embeds another must be listed above it:

| rank | engine | evidence |
|---|---|---|
| 1 | vllm | cmdline `vllm ...`, `-m vllm.entrypoints...`, title `VLLM::...` |
| 2 | sglang | cmdline `sglang`, `-m sglang.launch_server`, title `sglang::...` |
| 3 | tgi | cmdline `text-generation-launcher` / `text-generation-server` |
| 4 | triton-server | cmdline `tritonserver`, or maps `libtritonserver` |
| 5 | tensorrt-llm | cmdline `trtllm-serve` / `trtllm-build`, or maps `libtensorrt_llm` |
| 6 | llama.cpp | cmdline `llama-server` / `llama-cli`, or maps `libggml-cuda` |
| 7 | torch-tensorrt | maps `libtorchtrt` (a TensorRT engine inside PyTorch) |
| 8 | onnxruntime-trt | maps `libonnxruntime_providers_tensorrt` (ORT loads libnvinfer too) |
| 9 | onnxruntime | maps `libonnxruntime_providers_cuda` |
| 10 | tensorrt | maps `libnvinfer` |
| 11 | jax | maps `xla_extension`, `libjax`, `jaxlib` (JAX jobs often import torch or TF for data) |
| 12 | pytorch | maps `libtorch_cuda`, `libc10_cuda` |
| 13 | tensorflow | maps `libtensorflow_framework`, `_pywrap_tensorflow` |
| — | unknown | nothing above |

Serving engines (1-6) run their models with the frameworks below them, which is why they win.
The maps scan streams the file in 1 MiB chunks, searches each chunk only for the markers that
could still improve the answer (plain substring search), and stops as soon as the best answer
maps can give has been found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

UNKNOWN = "unknown"

ENGINES: tuple[str, ...] = (
    "vllm",
    "sglang",
    "tgi",
    "triton-server",
    "tensorrt-llm",
    "llama.cpp",
    "torch-tensorrt",
    "onnxruntime-trt",
    "onnxruntime",
    "tensorrt",
    "jax",
    "pytorch",
    "tensorflow",
)
_RANK = {name: i for i, name in enumerate(ENGINES)}

# Shared-library markers (matched against the path in a maps line) → engine. Longer markers
# that contain shorter ones are listed first in the alternation.
_LIB_MARKERS: tuple[tuple[str, str], ...] = (
    ("libtritonserver", "triton-server"),
    ("libtensorrt_llm", "tensorrt-llm"),
    ("libnvinfer_plugin_tensorrt_llm", "tensorrt-llm"),
    ("libggml-cuda", "llama.cpp"),
    ("libtorchtrt", "torch-tensorrt"),
    ("libonnxruntime_providers_tensorrt", "onnxruntime-trt"),
    ("libonnxruntime_providers_cuda", "onnxruntime"),
    ("libnvinfer", "tensorrt"),
    ("xla_extension", "jax"),
    ("libjax", "jax"),
    ("jaxlib/", "jax"),
    ("libtorch_cuda", "pytorch"),
    ("libc10_cuda", "pytorch"),
    ("libtensorflow_framework", "tensorflow"),
    ("_pywrap_tensorflow", "tensorflow"),
)
_LIB_ENGINE = dict(_LIB_MARKERS)
# (marker bytes, rank) strongest first: a chunk is searched only for markers that can improve
# on the best answer so far, with bytes `in` (a fast substring search, no regex).
_BY_RANK: tuple[tuple[bytes, int], ...] = tuple(
    sorted(((m.encode(), _RANK[e]) for m, e in _LIB_MARKERS), key=lambda x: x[1])
)
_BEST_FROM_MAPS = min(_RANK[e] for e in _LIB_ENGINE.values())

# Command-line evidence: (engine, regex over the space-joined argv).
_CMDLINE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r"(?:^|[\s/])vllm(?:\s|$)|(?:^|\s)vllm\.entrypoints|^VLLM::")),
    ("sglang", re.compile(r"(?:^|[\s/])sglang(?:\s|$)|(?:^|\s)sglang\.launch_server|^sglang::")),
    ("tgi", re.compile(r"(?:^|[\s/])text-generation-(?:launcher|server)(?:\s|$)")),
    ("triton-server", re.compile(r"(?:^|[\s/])tritonserver(?:\s|$)")),
    ("tensorrt-llm", re.compile(r"(?:^|[\s/])trtllm-(?:serve|build|bench)(?:\s|$)")),
    ("llama.cpp", re.compile(r"(?:^|[\s/])llama-(?:server|cli)(?:\s|$)")),
)

CHUNK = 1 << 20


def from_cmdline(args: Sequence[str]) -> str | None:
    """The engine the command line names, or None."""
    if not args:
        return None
    joined = " ".join(args)
    for engine, pattern in _CMDLINE:
        if pattern.search(joined):
            return engine
    return None


def from_maps(chunks: Iterable[bytes], better_than: str | None = None) -> tuple[str | None, int]:
    """The best-ranked engine whose library appears in /proc/<pid>/maps content.

    `chunks` are consecutive pieces of the file (any split); a marker cut in two by a chunk
    boundary is still found. Scanning stops once nothing better than the current answer (or
    than `better_than`, an engine already known from the command line) can appear. Returns
    (engine or None, bytes scanned).
    """
    limit = _RANK[better_than] if better_than is not None else len(ENGINES)
    if limit <= _BEST_FROM_MAPS:
        return None, 0
    best = limit
    scanned = 0
    tail = b""
    keep = max(len(m) for m, _ in _BY_RANK) - 1
    for chunk in chunks:
        scanned += len(chunk)
        data = tail + chunk
        for marker, rank in _BY_RANK:
            if rank >= best:
                break
            if marker in data:
                best = rank
                break
        if best == _BEST_FROM_MAPS:
            break
        tail = data[-keep:]
    return (ENGINES[best] if best < limit else None), scanned


def maps_can_improve(by_cmdline: str | None) -> bool:
    """Whether reading maps could change the answer the command line gave."""
    return by_cmdline is None or _RANK[by_cmdline] > _BEST_FROM_MAPS


def detect(args: Sequence[str], maps_chunks: Iterable[bytes] | None) -> tuple[str, str]:
    """(engine, evidence) with evidence "cmdline", "maps" or "none"; "unknown" when neither
    the command line nor the libraries say. `maps_chunks` None = maps unreadable."""
    by_cmd = from_cmdline(args)
    if maps_chunks is not None:
        by_maps, _ = from_maps(maps_chunks, better_than=by_cmd)
        if by_maps is not None:
            return by_maps, "maps"
    if by_cmd is not None:
        return by_cmd, "cmdline"
    return UNKNOWN, "none"


def rank(engine: str) -> int:
    """Precedence of `engine` (0 is strongest); unknown engines rank last."""
    return _RANK.get(engine, len(ENGINES))
