"""``compile_each``: what every family's ``WdeModel.compile_blocks`` does: torch.compile one method of each
repeated block (dynamic token counts), in place; the attention op stays eager inside it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


def compile_each(
    blocks: Iterable[nn.Module],
    method_name: str,
    options: Callable[[nn.Module], dict[str, Any]] | None = None,
) -> None:
    """Replace ``block.<method_name>`` of each block by its compiled version; ``options(block)``: the
    inductor options of that block (e.g. the int8 ones where it holds int8 linears)."""
    for block in blocks:
        method = getattr(block, method_name)
        compiled = torch.compile(method, dynamic=True, options=options(block) if options else None)
        setattr(block, method_name, compiled)  # an instance attribute shadows the method
