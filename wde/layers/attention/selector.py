"""Picks the attention backend: an explicit name, or the platform's best available one, with the reason each
other backend was passed over."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.backends.flash_attn import FlashAttnBackend
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.torch_sdpa import TorchSdpaBackend
from wde.layers.attention.backends.torch_varlen import TorchVarlenBackend
from wde.layers.attention.backends.varlen_cpu import VarlenCpuBackend
from wde.layers.attention.backends.xformers import XFormersBackend
from wde.layers.attention.spec import AttentionSpec
from wde.platforms.interface import Platform

logger = logging.getLogger(__name__)

BACKENDS: dict[str, type[AttentionBackend]] = {
    "flash_attn": FlashAttnBackend,
    "xformers": XFormersBackend,
    "torch_varlen": TorchVarlenBackend,
    "varlen_cpu": VarlenCpuBackend,
    "torch_sdpa": TorchSdpaBackend,
    "naive": NaiveBackend,
}
ALIASES = {
    "sdpa": "torch_sdpa",
    "flash": "flash_attn",
    "flash-attn": "flash_attn",
    "torch-sdpa": "torch_sdpa",
    "varlen": "torch_varlen",
    "torch-varlen": "torch_varlen",
    "varlen-cpu": "varlen_cpu",
}


def select_attention_backend(
    name: str,
    platform: Platform,
    dtype: torch.dtype,
    specs: Sequence[AttentionSpec],
    needs_key_limits: bool = False,
) -> tuple[type[AttentionBackend], dict[str, str]]:
    """Return (a backend class that honours every layer's spec, {skipped backend: reason}).
    ``needs_key_limits``: some inputs have tokens that are not attended to (``metadata.num_keys``)."""
    name = ALIASES.get(name, name)
    if name != "auto":
        if name not in BACKENDS:
            raise ValueError(f"attention backend {name!r} is not one of {[*BACKENDS, 'auto']}")
        usable, reason = _usable(BACKENDS[name], platform, dtype, specs, needs_key_limits)
        if not usable:
            raise ValueError(
                f"attention backend {name!r} cannot run here: {reason}; pass --attention-backend auto"
            )
        return BACKENDS[name], {}

    chosen: type[AttentionBackend] | None = None
    skipped: dict[str, str] = {}
    for candidate in platform.attention_backend_order:
        usable, reason = _usable(BACKENDS[candidate], platform, dtype, specs, needs_key_limits)
        if usable and chosen is None:
            chosen = BACKENDS[candidate]
        elif usable:
            assert chosen is not None
            skipped[candidate] = f"available, but {chosen.name} comes first on {platform.device_type}"
        else:
            skipped[candidate] = reason
    if chosen is None:
        raise ValueError(f"no attention backend can run on {platform.device_type} with {dtype}: {skipped}")
    for other, why in skipped.items():
        logger.info("attention backend %s skipped: %s", other, why)
    return chosen, skipped


def _usable(
    backend_cls: type[AttentionBackend],
    platform: Platform,
    dtype: torch.dtype,
    specs: Sequence[AttentionSpec],
    needs_key_limits: bool = False,
) -> tuple[bool, str]:
    available, reason = backend_cls.is_available(platform.device_type, dtype)
    if not available:
        return False, reason
    if needs_key_limits and not backend_cls.supports_key_limits:
        return False, "attends to every token, and this model hides its query expansion tokens (attend=False)"
    for spec in dict.fromkeys(specs):  # distinct specs, in layer order
        supported, reason = backend_cls.supports(spec)
        if not supported:
            return False, f"{reason} (a layer with {spec.describe()})"
    return True, ""
