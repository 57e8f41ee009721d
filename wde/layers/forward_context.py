"""Per-forward state (the batch's attention metadata; a model with LoRA task adapters: each token's adapter)
that layers read without it being threaded through every module's signature. A ContextVar, so two engines
in one process (each on its own thread) never read each other's batch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wde.layers.attention.backend import AttentionMetadata
    from wde.layers.lora import TokenAdapters


@dataclass
class ForwardContext:
    attn_metadata: AttentionMetadata
    # each token's task adapter (``InputBatch.adapters``); None: the model's default (config.json's)
    adapters: TokenAdapters | None = None


_forward_context: ContextVar[ForwardContext | None] = ContextVar("wde_forward_context", default=None)


@contextmanager
def set_forward_context(
    attn_metadata: AttentionMetadata, adapters: TokenAdapters | None = None
) -> Iterator[None]:
    token = _forward_context.set(ForwardContext(attn_metadata, adapters))
    try:
        yield
    finally:
        _forward_context.reset(token)


def get_forward_context() -> ForwardContext:
    context = _forward_context.get()
    if context is None:
        raise RuntimeError("no forward context: run the model inside `with set_forward_context(metadata):`")
    return context
