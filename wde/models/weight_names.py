"""HF checkpoint names -> our parameter names: strip the base-model prefix, fuse query/key/value into
qkv_proj, accept old ``gamma``/``beta`` LayerNorm names."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

import torch
from torch import nn

logger = logging.getLogger(__name__)

_QKV = re.compile(r"^(.*)\.attention\.self\.(query|key|value)\.(weight|bias)$")
_QKV_SHARD = {"query": 0, "key": 1, "value": 2}
_RENAMES = (
    (".intermediate.dense.", ".intermediate."),
    (".LayerNorm.gamma", ".LayerNorm.weight"),
    (".LayerNorm.beta", ".LayerNorm.bias"),
)


def _our_name(name: str, prefixes: tuple[str, ...]) -> tuple[str, int | None]:
    """(parameter name, qkv shard index or None)."""
    for prefix in prefixes:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    for old, new in _RENAMES:
        name = name.replace(old, new)
    match = _QKV.match(name)
    if match:
        return f"{match[1]}.attention.qkv_proj.{match[3]}", _QKV_SHARD[match[2]]
    return name, None


@torch.no_grad()
def load_named_weights(
    model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]], prefixes: tuple[str, ...]
) -> set[str]:
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    num_qkv_shards: dict[str, int] = {}
    ignored: list[str] = []
    for checkpoint_name, tensor in weights:
        name, shard = _our_name(checkpoint_name, prefixes)
        if name not in params:
            ignored.append(checkpoint_name)
            continue
        param = params[name]
        if shard is None:
            if param.shape != tensor.shape:
                raise ValueError(
                    f"checkpoint tensor {checkpoint_name} has shape {tuple(tensor.shape)}, "
                    f"but the model's {name} is {tuple(param.shape)}: does config.json match the weights?"
                )
            param.copy_(tensor)
            loaded.add(name)
            continue
        shard_size = param.shape[0] // 3
        param[shard * shard_size : (shard + 1) * shard_size].copy_(tensor)
        num_qkv_shards[name] = num_qkv_shards.get(name, 0) + 1
        if num_qkv_shards[name] == 3:
            loaded.add(name)
    if ignored:
        logger.debug("checkpoint tensors not used by %s: %s", type(model).__name__, ignored)
    missing = sorted(set(params) - loaded)
    if missing:
        raise ValueError(
            f"the checkpoint lacks {len(missing)} weights of {type(model).__name__}, e.g. {missing[:5]}; "
            "is it the right architecture in config.json?"
        )
    return loaded
