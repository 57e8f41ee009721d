"""The sentence-transformers ``Dense`` modules of an embedding model, applied to the pooled embedding in
order (EmbeddingGemma: 768 -> 3072 -> 768, no activation; older models: one Dense + Tanh).

Each module's folder holds its weights as sentence-transformers saves them: ``model.safetensors`` (or
``pytorch_model.bin``) with ``linear.weight`` ``[out_features, in_features]`` and ``linear.bias``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from wde.config import DenseConfig

DENSE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": lambda x: x,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": F.relu,
    "gelu": F.gelu,
}


def _read_dense_weights(config: DenseConfig) -> dict[str, torch.Tensor]:
    """A module folder's ``model.safetensors`` / ``pytorch_model.bin``, or a state-dict file itself (BGE-M3's
    ``colbert_linear.pt``: ``weight``, ``bias``)."""
    folder = Path(config.path)
    if folder.is_file():
        return torch.load(str(folder), map_location="cpu", weights_only=True)
    if (folder / "model.safetensors").is_file():
        return load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(str(folder / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    raise FileNotFoundError(
        f"{folder} has no model.safetensors or pytorch_model.bin; copy the Dense module's weights from the "
        "model's repository"
    )


class DenseStack(nn.Module):
    """``pooled -> activation(linear(pooled))`` for each Dense module, in order."""

    def __init__(self, configs: list[DenseConfig]) -> None:
        super().__init__()
        self.configs = configs
        self.linears = nn.ModuleList(nn.Linear(c.in_features, c.out_features, bias=c.bias) for c in configs)
        self.activations = [DENSE_ACTIVATIONS[c.activation] for c in configs]

    @classmethod
    @torch.no_grad()
    def load(cls, configs: list[DenseConfig], device: torch.device, dtype: torch.dtype) -> DenseStack:
        """Build the stack and copy each module's checkpoint in (checking names and shapes)."""
        stack = cls(configs)
        for config, linear in zip(configs, stack.linears, strict=True):
            checkpoint = _read_dense_weights(config)
            weights = {name.removeprefix("linear."): tensor for name, tensor in checkpoint.items()}
            expected = dict(linear.named_parameters())
            if set(weights) != set(expected):
                raise ValueError(
                    f"{config.path} holds weights {sorted('linear.' + n for n in weights)}, expected "
                    f"{sorted('linear.' + n for n in expected)} (in_features={config.in_features}, "
                    f"out_features={config.out_features}, bias={config.bias})"
                )
            for name, param in expected.items():
                if weights[name].shape != param.shape:
                    raise ValueError(
                        f"{config.path}: linear.{name} has shape {tuple(weights[name].shape)}, its "
                        f"config.json says {tuple(param.shape)}"
                    )
                param.copy_(weights[name])
        return stack.to(device=device, dtype=dtype).eval()

    @property
    def dtype(self) -> torch.dtype:
        first: nn.Linear = self.linears[0]  # type: ignore[assignment]  # a ModuleList of Linear layers
        return first.weight.dtype

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        # pooled: [num_seqs, in_features of the first module]
        for linear, activation in zip(self.linears, self.activations, strict=True):
            pooled = activation(linear(pooled))  # [num_seqs, out_features]
        return pooled
