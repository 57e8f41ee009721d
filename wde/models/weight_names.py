"""Checkpoint tensors -> model parameters.

``load_weights_by_name(model, weights, target)`` is the one loop every family uses: ``target(name)`` says
which parameter a checkpoint tensor fills, and which rows of it (a fused projection takes its parts as row
slices), or None to skip the tensor; every parameter must end up fully filled. ``bert_target`` is BERT's
mapping: strip the base-model prefix, fuse query/key/value into qkv_proj, accept old ``gamma``/``beta``
LayerNorm names.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

import torch
from torch import nn

logger = logging.getLogger(__name__)

# (our parameter name, the rows it fills: None for the whole parameter)
WeightTarget = tuple[str, slice | None]

_QKV = re.compile(r"^(.*)\.attention\.self\.(query|key|value)\.(weight|bias)$")
_QKV_SHARD = {"query": 0, "key": 1, "value": 2}
_RENAMES = (
    (".intermediate.dense.", ".intermediate."),
    (".LayerNorm.gamma", ".LayerNorm.weight"),
    (".LayerNorm.beta", ".LayerNorm.bias"),
)


def strip_prefix(name: str, prefixes: tuple[str, ...]) -> str:
    for prefix in prefixes:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def fused_rows(shard: int, sizes: tuple[int, ...]) -> slice:
    """The rows of part ``shard`` in a projection fused from parts of ``sizes`` rows (q, k, v: GQA's k and v
    are smaller than q)."""
    start = sum(sizes[:shard])
    return slice(start, start + sizes[shard])


def fused_qkv_target(
    prefixes: tuple[str, ...],
    renames: tuple[tuple[str, str], ...],
    qkv: re.Pattern[str],
    shards: dict[str, int],
    hidden_size: int,
) -> Callable[[str], WeightTarget]:
    """Strip the base-model prefix, apply ``renames``, and fuse the tensors ``qkv`` matches (groups: the
    layer's prefix, the part named in ``shards``, weight/bias) into ``<prefix>.attention.qkv_proj``."""

    def target(name: str) -> WeightTarget:
        name = strip_prefix(name, prefixes)
        for old, new in renames:
            name = name.replace(old, new)
        match = qkv.match(name)
        if match:
            rows = fused_rows(shards[match[2]], (hidden_size,) * 3)
            return f"{match[1]}.attention.qkv_proj.{match[3]}", rows
        return name, None

    return target


def bert_target(prefixes: tuple[str, ...], hidden_size: int) -> Callable[[str], WeightTarget]:
    return fused_qkv_target(prefixes, _RENAMES, _QKV, _QKV_SHARD, hidden_size)


def load_named_weights(
    model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]], prefixes: tuple[str, ...], hidden_size: int
) -> set[str]:
    """BERT-named checkpoints (BERT, XLM-RoBERTa and their classifiers)."""
    return load_weights_by_name(model, weights, bert_target(prefixes, hidden_size))


@torch.no_grad()
def load_weights_by_name(
    model: nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    target: Callable[[str], WeightTarget | None],
) -> set[str]:
    """Copy every checkpoint tensor into its target; returns the parameters loaded. Raises naming what is
    missing or of the wrong shape."""
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    num_rows_filled: dict[str, int] = {}
    ignored: list[str] = []
    for checkpoint_name, tensor in weights:
        mapped = target(checkpoint_name)
        if mapped is None or mapped[0] not in params:
            ignored.append(checkpoint_name)
            continue
        name, rows = mapped
        param = params[name]
        destination = param if rows is None else param[rows]
        if destination.shape != tensor.shape:
            where = name if rows is None else f"{name}[{rows.start}:{rows.stop}]"
            raise ValueError(
                f"checkpoint tensor {checkpoint_name} has shape {tuple(tensor.shape)}, but the model's "
                f"{where} is {tuple(destination.shape)}: does config.json match the weights?"
            )
        destination.copy_(tensor)
        num_rows_filled[name] = num_rows_filled.get(name, 0) + destination.shape[0]
        if num_rows_filled[name] >= param.shape[0]:
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
