"""Picks the attention backend: an explicit name, or the platform's best available one, with the reason each
other backend was passed over."""

from __future__ import annotations

import logging

import torch

from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.backends.flash_attn import FlashAttnBackend
from wde.layers.attention.backends.naive import NaiveBackend
from wde.layers.attention.backends.torch_sdpa import TorchSdpaBackend
from wde.layers.attention.backends.xformers import XFormersBackend
from wde.platforms.interface import Platform

logger = logging.getLogger(__name__)

BACKENDS: dict[str, type[AttentionBackend]] = {
    "flash_attn": FlashAttnBackend,
    "xformers": XFormersBackend,
    "torch_sdpa": TorchSdpaBackend,
    "naive": NaiveBackend,
}
ALIASES = {
    "sdpa": "torch_sdpa",
    "flash": "flash_attn",
    "flash-attn": "flash_attn",
    "torch-sdpa": "torch_sdpa",
}


def select_attention_backend(
    name: str, platform: Platform, dtype: torch.dtype, head_size: int
) -> tuple[type[AttentionBackend], dict[str, str]]:
    """Return (backend class, {skipped backend: reason})."""
    name = ALIASES.get(name, name)
    if name != "auto":
        if name not in BACKENDS:
            raise ValueError(f"attention backend {name!r} is not one of {[*BACKENDS, 'auto']}")
        available, reason = BACKENDS[name].is_available(platform.device_type, dtype, head_size)
        if not available:
            raise ValueError(
                f"attention backend {name!r} cannot run here: {reason}; pass --attention-backend auto"
            )
        return BACKENDS[name], {}

    chosen: type[AttentionBackend] | None = None
    skipped: dict[str, str] = {}
    for candidate in platform.attention_backend_order:
        available, reason = BACKENDS[candidate].is_available(platform.device_type, dtype, head_size)
        if available and chosen is None:
            chosen = BACKENDS[candidate]
        elif available:
            skipped[candidate] = f"available, but {chosen.name} comes first on {platform.device_type}"
        else:
            skipped[candidate] = reason
    if chosen is None:
        raise ValueError(f"no attention backend can run on {platform.device_type} with {dtype}: {skipped}")
    for other, why in skipped.items():
        logger.info("attention backend %s skipped: %s", other, why)
    return chosen, skipped
