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
            raise ValueError(no_cuda_message(torch.__version__, torch.version.cuda))
    return PLATFORMS[device]()


def no_cuda_message(torch_version: str, cuda_version: str | None) -> str:
    """The one line `--device cuda` stops with where torch sees no GPU: a CPU-only torch, or no GPU visible
    (none given to the container, or no driver)."""
    if cuda_version is None:
        return (
            f"device 'cuda' was asked for but this torch ({torch_version}) is a CPU-only build: install the "
            "CUDA build (PyPI's Linux torch), or pass --device cpu"
        )
    return (
        f"device 'cuda' was asked for but no CUDA device is visible (torch {torch_version}, CUDA "
        f"{cuda_version}): give the container the GPUs (docker run --gpus all ...) and check the host's "
        "NVIDIA driver (nvidia-smi), or pass --device cpu"
    )


__all__ = ["Platform", "get_platform", "resolve_device"]
