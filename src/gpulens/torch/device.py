"""Which device the job trains on, and the CUDA caching allocator's memory figures."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Device:
    """The training device: `index` is torch's CUDA index (None on the CPU); `uuid` the GPU's
    UUID as NVML prints it ("GPU-..."), `model` its name, both None on the CPU."""

    name: str  # "cpu" or "cuda:0"
    index: int | None = None
    uuid: str | None = None
    model: str | None = None

    @property
    def cuda(self) -> bool:
        return self.index is not None


def _cuda_device(index: int) -> Device:
    props = torch.cuda.get_device_properties(index)
    raw = getattr(props, "uuid", None)
    uuid = None
    if raw is not None:
        text = str(raw)
        uuid = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    return Device(f"cuda:{index}", index, uuid, str(props.name))


def find_device(model: torch.nn.Module | None, device: str | torch.device | None) -> Device:
    """The device named by `device`, else the one the model's parameters live on, else the
    current CUDA device when CUDA is available and initialised, else the CPU."""
    chosen: torch.device | None = torch.device(device) if device is not None else None
    if chosen is None and model is not None:
        for p in model.parameters():
            chosen = p.device
            break
    if chosen is None and torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        chosen = torch.device("cuda", torch.cuda.current_device())
    if chosen is None or chosen.type != "cuda":
        return Device("cpu")
    index = chosen.index if chosen.index is not None else torch.cuda.current_device()
    return _cuda_device(index)


def memory_values(dev: Device) -> dict[str, float]:
    """Allocator figures of a CUDA device (nothing for the CPU): the most allocated since the
    process started, reserved now, and reserved minus allocated now (cached, unused)."""
    if not dev.cuda:
        return {}
    allocated = float(torch.cuda.memory_allocated(dev.index))
    reserved = float(torch.cuda.memory_reserved(dev.index))
    return {
        "app_memory_max_allocated_bytes": float(torch.cuda.max_memory_allocated(dev.index)),
        "app_memory_reserved_bytes": reserved,
        "app_memory_fragmentation_bytes": max(reserved - allocated, 0.0),
    }
