"""Builds a model from a local HF directory: config.json + model.safetensors (or pytorch_model.bin)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from wde.config import ModelConfig
from wde.layers.attention.backend import AttentionBackend
from wde.models.registry import resolve_architecture

logger = logging.getLogger(__name__)


def iterate_weights(model_dir: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) from every *.safetensors file, else from pytorch_model*.bin (weights_only)."""
    model_dir = Path(model_dir)
    safetensors_files = sorted(model_dir.glob("*.safetensors"))
    if safetensors_files:
        for path in safetensors_files:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    yield name, f.get_tensor(name)
        return
    bin_files = sorted(model_dir.glob("pytorch_model*.bin"))
    if not bin_files:
        raise FileNotFoundError(
            f"{model_dir} has no model.safetensors or pytorch_model.bin; "
            "point --model at a local directory in HuggingFace layout"
        )
    for path in bin_files:
        state_dict = torch.load(str(path), map_location="cpu", weights_only=True)
        yield from state_dict.items()


def load_model(
    model_config: ModelConfig, backend: AttentionBackend, device: torch.device, dtype: torch.dtype
) -> nn.Module:
    _, model_cls = resolve_architecture(model_config.hf_config.get("architectures"), model_config.model)
    # 1. build without initializing (every weight comes from the checkpoint)
    with torch.device("meta"):
        model = model_cls(model_config.hf_config, backend)
    model = model.to_empty(device=device).to(dtype)
    # 2. copy the checkpoint in
    model.load_weights(iterate_weights(model_config.model))
    return model.eval()
