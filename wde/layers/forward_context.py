"""Per-forward state (the batch's attention metadata) that attention layers read without it being threaded
through every module's signature."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wde.layers.attention.backend import AttentionMetadata


@dataclass
class ForwardContext:
    attn_metadata: AttentionMetadata


_forward_context: ForwardContext | None = None


@contextmanager
def set_forward_context(attn_metadata: AttentionMetadata) -> Iterator[None]:
    global _forward_context
    previous = _forward_context
    _forward_context = ForwardContext(attn_metadata)
    try:
        yield
    finally:
        _forward_context = previous


def get_forward_context() -> ForwardContext:
    if _forward_context is None:
        raise RuntimeError("no forward context: run the model inside `with set_forward_context(metadata):`")
    return _forward_context
