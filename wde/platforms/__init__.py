"""``get_platform(device)``: resolves "auto" at call time (never at import)."""

from __future__ import annotations

from wde.platforms.cpu import CpuPlatform
from wde.platforms.cuda import CudaPlatform
from wde.platforms.interface import Platform

PLATFORMS: dict[str, type[Platform]] = {"cpu": CpuPlatform, "cuda": CudaPlatform}


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def get_platform(device: str) -> Platform:
    device = resolve_device(device)
    if device not in PLATFORMS:
        raise ValueError(f"device {device!r} is not one of {sorted(PLATFORMS)} or 'auto'")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' was asked for but torch sees no CUDA device; pass --device cpu")
    return PLATFORMS[device]()


__all__ = ["Platform", "get_platform", "resolve_device"]
