"""Inference engines of a PyTorch model: detect which one a callable already is, or build one.

Engines (the `engine` label of the inference readings):

- `eager`: the module as it is.
- `compile`: `torch.compile(model)`; torch compiles at the first call, so a failure shows there.
- `tensorrt`: Torch-TensorRT (`torch_tensorrt.compile`, FP16 enabled) with the first call's
  inputs as the example; needs CUDA and the `torch_tensorrt` package.
- `onnxruntime`: exported with `torch.onnx.export` (the first dimension of every input dynamic)
  and run by an `onnxruntime.InferenceSession` (CUDA provider first when there is one); needs
  the `onnx` and `onnxruntime` packages. Inputs and outputs cross as NumPy arrays.

`build` is called with the first call's arguments and raises `EngineUnavailable` with the
reason (package missing, no GPU, the build's own error); the wrapper then falls back to eager.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable, Sequence
from typing import Any

import torch

ENGINES: tuple[str, ...] = ("eager", "compile", "tensorrt", "onnxruntime")
DISPLAY: dict[str, str] = {
    "eager": "PyTorch eager",
    "compile": "torch.compile",
    "tensorrt": "TensorRT",
    "onnxruntime": "ONNX Runtime",
}


class EngineUnavailable(Exception):
    """The engine cannot be built here; the message says why."""


def detect(model: Any) -> str:
    """The engine a callable already is: `compile` for a torch.compile'd module or function,
    `tensorrt` for a Torch-TensorRT module, `onnxruntime` for an InferenceSession, else
    `eager`."""
    kind = type(model)
    module = kind.__module__ or ""
    if module.startswith("torch_tensorrt") or "TRTModule" in kind.__name__:
        return "tensorrt"
    if module.startswith("onnxruntime"):
        return "onnxruntime"
    if kind.__name__ == "OptimizedModule" or hasattr(model, "_torchdynamo_orig_callable"):
        return "compile"
    return "eager"


def check_engine(engine: str | None) -> None:
    """Raise ValueError naming the choices when `engine` is not one of `ENGINES` (or None)."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(
            f"engine must be one of {', '.join(ENGINES)} or None (detect), got {engine!r}"
        )


def build(
    model: Any, engine: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """A callable running `model` on `engine`, built for inputs like `args` / `kwargs`."""
    if engine == "eager":
        return model  # type: ignore[no-any-return]
    if engine == "compile":
        return torch.compile(model)
    if engine == "tensorrt":
        return _tensorrt(model, args, kwargs)
    if engine == "onnxruntime":
        return _onnxruntime(model, args, kwargs)
    raise EngineUnavailable(f"unknown engine {engine!r}")


def _package(name: str, pip: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EngineUnavailable(f"{name} is not installed ({exc}); pip install {pip}") from None


def _tensors(args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if kwargs or len(tensors) != len(args) or not tensors:
        raise EngineUnavailable(
            "this engine is built for positional tensor inputs only, got "
            f"{[type(a).__name__ for a in args]} and keywords {sorted(kwargs)}"
        )
    return tensors


def _tensorrt(model: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    trt = _package("torch_tensorrt", "torch-tensorrt")
    tensors = _tensors(args, kwargs)
    if not torch.cuda.is_available() or not all(t.is_cuda for t in tensors):
        raise EngineUnavailable("TensorRT needs CUDA tensors on an NVIDIA GPU")
    try:
        return trt.compile(  # type: ignore[no-any-return]
            model, inputs=tensors, enabled_precisions={torch.float16, torch.float32}
        )
    except Exception as exc:
        raise EngineUnavailable(f"the TensorRT build failed: {type(exc).__name__}: {exc}") from exc


def _onnxruntime(model: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    ort = _package("onnxruntime", "onnxruntime (or onnxruntime-gpu) onnx")
    _package("onnx", "onnx")
    tensors = _tensors(args, kwargs)
    names = [f"input_{i}" for i in range(len(tensors))]
    buffer = io.BytesIO()
    try:
        torch.onnx.export(
            model,
            tuple(tensors),
            buffer,  # type: ignore[arg-type]
            input_names=names,
            dynamic_axes={n: {0: "batch"} for n in names},
            dynamo=False,
        )
    except Exception as exc:
        raise EngineUnavailable(f"the ONNX export failed: {type(exc).__name__}: {exc}") from exc
    providers = [
        p
        for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
        if p in ort.get_available_providers()
    ]
    try:
        session = ort.InferenceSession(buffer.getvalue(), providers=providers)
    except Exception as exc:
        raise EngineUnavailable(
            f"ONNX Runtime could not load the model: {type(exc).__name__}: {exc}"
        ) from exc
    device = tensors[0].device
    output_names = [o.name for o in session.get_outputs()]

    def run(*inputs: torch.Tensor) -> Any:
        feed = {n: t.detach().cpu().numpy() for n, t in zip(names, inputs, strict=True)}
        outputs = [torch.from_numpy(o).to(device) for o in session.run(output_names, feed)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    return run
