"""The decoder families' fused path (``forward_fused``: residual add + RMSNorm, q/k norm + RoPE in place,
activation-and-mul, ``wde/layers/fused``), which runs on CUDA, taken here on the CPU with the Triton
kernels under the interpreter (``tests/conftest.py`` turns it on): the same embeddings as the unfused
layers. float32 on both paths, so the only differences are the kernels' float32 reduction order: cosine
>= 1 - 1e-6 and max abs difference <= 1e-5. ``head_dim`` 32: the kernels rotate heads whose half is a
power of two (the tiny checkpoints' default 24 takes the reference)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.models.tiny_decoders import save_tiny_mistral, save_tiny_qwen2
from tests.models.tiny_gemma3 import save_tiny_gemma3
from tests.models.tiny_qwen3 import save_tiny_qwen3
from tests.tiny_models import training_texts
from wde import LLM
from wde.layers.fused import ops

pytest.importorskip("triton", reason="the fused path's kernels need Triton (pip install triton)")
pytestmark = pytest.mark.slow  # the interpreter: ~1 ms a kernel program, 20 s in all
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)

SAVERS: dict[str, Callable[..., Path]] = {
    "qwen3": save_tiny_qwen3,
    "qwen2": save_tiny_qwen2,
    "mistral": save_tiny_mistral,
    "gemma3": save_tiny_gemma3,
}
# short: the interpreter runs each kernel program in Python (~1 ms each, a program per token and kernel)
TEXTS = [text[:24] for text in training_texts()[:3]]


def embeddings(path: Path) -> np.ndarray:
    llm = LLM(
        str(path), dtype="float32", attention_backend="naive", max_num_batched_tokens=256, max_model_len=64
    )
    return np.stack([output.embedding for output in llm.encode(TEXTS)])  # [num_texts, hidden_size]


@pytest.mark.parametrize("family", sorted(SAVERS))
def test_fused_path_gives_the_unfused_embeddings(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = SAVERS[family](tmp_path / family, head_dim=32)
    expected = embeddings(path)
    from wde.layers.fused import triton_kernels

    calls: list[str] = []
    for name in ("add_rms_norm", "qk_norm_rotary", "act_and_mul"):
        kernel = getattr(triton_kernels, name)
        monkeypatch.setattr(
            triton_kernels, name, lambda *a, _k=kernel, _n=name, **kw: calls.append(_n) or _k(*a, **kw)
        )
    monkeypatch.setattr(ops, "fused_kernels_enabled", lambda x: True)
    got = embeddings(path)
    assert {"add_rms_norm", "qk_norm_rotary", "act_and_mul"} <= set(calls), calls
    cosines = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 1 - 1e-6 and np.abs(got - expected).max() <= 1e-5
