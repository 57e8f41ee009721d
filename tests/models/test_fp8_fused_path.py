"""fp8 through the decoder families' fused path, on the CPU: the kernels under Triton's interpreter (as in
``test_fused_layers.py``), ``torch._scaled_mm`` on the CPU (it runs there), the engine's refusal of fp8 off a
GPU lifted for the test. What is checked is the plumbing: each fp8 linear whose input a fused kernel makes
(q/k/v after the input norm, gate/up after the post-attention norm, down after the activation) receives
that kernel's ``Fp8Activation``, the o-projection (fed by the attention) a 16-bit tensor that it quantizes
itself, and the embeddings stay near the 16-bit model's. The quantized values themselves are checked
against the PyTorch ops in ``tests/unit/layers/test_fp8_rows_kernel.py``.

Tolerance: cosine >= 0.5 to the bfloat16 model, a floor against garbage (an unrelated embedding is near 0
in these dimensions), not a measure of fp8's accuracy: the interpreter's float8 cast drops the carry into the
exponent on some round-ups (a value off by a factor of two), which on these tiny models (weights at 10x
HF's spread) took one text to 0.76 where the others stayed at 0.96. fp8's accuracy with the GPU's cast:
``tests/gpu/test_fused_decoders.py`` and the GPU bench."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.models.tiny_gemma3 import save_tiny_gemma3
from tests.models.tiny_qwen3 import save_tiny_qwen3
from tests.tiny_models import training_texts
from wde import LLM
from wde.config import EngineConfig
from wde.layers.fused import ops
from wde.layers.quantization import fp8_linear
from wde.layers.quantization.fp8_activation import Fp8Activation
from wde.layers.quantization.fp8_linear import Fp8Linear

pytest.importorskip("triton", reason="the fused path's kernels need Triton (pip install triton)")
pytestmark = pytest.mark.slow  # the interpreter runs each kernel program in Python
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)

SAVERS: dict[str, Callable[..., Path]] = {"qwen3": save_tiny_qwen3, "gemma3": save_tiny_gemma3}
TEXTS = [text[:24] for text in training_texts()[:2]]  # short: the interpreter is slow
MIN_COSINE = 0.5
# the linear's attribute name -> what its input is on the fused fp8 path
EXPECTED_INPUTS = {"qkv_proj": "Fp8Activation", "gate_up_proj": "Fp8Activation", "down_proj": "Fp8Activation"}
EXPECTED_INPUTS["o_proj"] = "Tensor"


def embeddings(path: Path, seen: dict | None = None, **engine_args: object) -> np.ndarray:
    """The texts' embeddings; with ``seen`` (filled by the spy: an fp8 linear's id -> its inputs' types),
    turned into the linears' attribute names -> their inputs' types before the engine goes."""
    llm = LLM(
        str(path),
        device="cpu",
        dtype="bfloat16",
        attention_backend="torch_sdpa",
        max_num_batched_tokens=256,  # the start-up profile pass runs the interpreter too: a small one
        max_model_len=64,
        **engine_args,
    )
    try:
        result = np.stack([output.embedding for output in llm.encode(TEXTS)])
        if seen is not None:  # ids -> attribute names ("qkv_proj"), every layer's merged
            by_id = dict(seen)
            seen.clear()
            for name, module in llm.engine.runner.model.named_modules():
                if id(module) in by_id:
                    seen.setdefault(name.rsplit(".", 1)[-1], set()).update(by_id[id(module)])
        return result
    finally:
        llm.engine.shutdown()


@pytest.mark.parametrize("family", sorted(SAVERS))
def test_each_fp8_linear_takes_what_the_fused_kernels_hand_it(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = SAVERS[family](tmp_path / family, head_dim=32)
    reference = embeddings(path)  # the unfused 16-bit layers (the fused ones equal them: test_fused_layers)
    for module in (ops, fp8_linear):  # the fused path and the quantizing kernel, on CPU tensors
        monkeypatch.setattr(module, "fused_kernels_enabled", lambda x: True)
    monkeypatch.setattr(EngineConfig, "_verify_quantization", lambda self: None)  # fp8 on the CPU
    seen: dict = {}
    forward = Fp8Linear.forward

    def spy(self: Fp8Linear, x: torch.Tensor | Fp8Activation) -> torch.Tensor:
        seen.setdefault(id(self), set()).add(type(x).__name__)
        return forward(self, x)

    monkeypatch.setattr(Fp8Linear, "forward", spy)
    quantized = embeddings(path, seen, quantization="fp8")
    assert seen == {name: {kind} for name, kind in EXPECTED_INPUTS.items()}
    norms = np.linalg.norm(quantized, axis=1) * np.linalg.norm(reference, axis=1)
    cosines = (quantized * reference).sum(axis=1) / norms
    assert np.isfinite(quantized).all() and cosines.min() >= MIN_COSINE, cosines
