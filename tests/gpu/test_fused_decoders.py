"""On CUDA: the decoder families' fused kernels and fp8 through the engine. A tiny random Qwen3 and Gemma3
(``head_dim`` 32: the kernels' power-of-two halves) embed the same with the fused kernels as without
(``WDE_FUSED_KERNELS=0``), eagerly and through CUDA-graph replay; ``--quantization fp8`` (its activations
quantized inside the fused kernels) stays within its tolerance of float16 where the GPU has FP8 matrix
units, and is refused in one line where it has not.
The kernels themselves at the families' real shapes: ``tests/unit/layers/test_fused_kernels.py``, which
runs compiled here (``benchmarks.gpu_check`` runs it with this folder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.models.tiny_gemma3 import save_tiny_gemma3
from tests.models.tiny_qwen3 import save_tiny_qwen3
from tests.tiny_models import training_texts
from wde import LLM

pytest.importorskip("triton", reason="the fused kernels need Triton (PyTorch's CUDA builds bring it)")

SAVERS: dict[str, Callable[..., Path]] = {"qwen3": save_tiny_qwen3, "gemma3": save_tiny_gemma3}
MIN_COSINE_FUSED = 0.9999  # float16 both ways: the kernels round less often than the unfused layers
# e4m3 keeps 3 mantissa bits (a relative step of 1/16 per element, activations and weights alike); on these
# tiny models (weights at 10x HF's spread, which amplifies every rounding) the same arithmetic emulated on
# the CPU (float8 casts and float32 sums) gives min cosine 0.95-0.97 (Qwen3) and 0.99 (Gemma3) against 16
# bits over 12 texts. A wrong scale, layout or skipped quantization gives far less.
MIN_COSINE_FP8 = 0.93


@pytest.fixture(scope="module", params=sorted(SAVERS))
def decoder_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    family = request.param
    return SAVERS[family](tmp_path_factory.mktemp(f"fused_{family}") / family, head_dim=32)


def embeddings(path: Path, **engine_args: object) -> np.ndarray:
    llm = LLM(str(path), device="cuda", dtype="float16", max_num_batched_tokens=4096, **engine_args)
    try:
        return np.stack([output.embedding for output in llm.encode(training_texts()[:48])])
    finally:
        llm.engine.shutdown()


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


@pytest.mark.parametrize("mode", ["none", "eager"])
def test_fused_kernels_give_the_unfused_embeddings(
    decoder_dir: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused = embeddings(decoder_dir, cuda_graph_mode=mode)
    monkeypatch.setenv("WDE_FUSED_KERNELS", "0")
    unfused = embeddings(decoder_dir, cuda_graph_mode=mode)
    assert min_cosine(fused, unfused) >= MIN_COSINE_FUSED


def test_fp8_within_its_tolerance_of_float16_or_refused(decoder_dir: Path) -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        with pytest.raises(ValueError, match=r"compute capability 8\.9 or newer"):
            embeddings(decoder_dir, quantization="fp8")
        return
    assert min_cosine(embeddings(decoder_dir, quantization="fp8"), embeddings(decoder_dir)) >= MIN_COSINE_FP8
