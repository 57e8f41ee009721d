"""float32 block linears on either GEMM (``WDE_FLOAT_GEMM``: aten's, or oneDNN's with the weight packed once):
every family answers the same within float32 rounding, whichever the load-time measurement picks on the CI
machine. Tolerance: the two sum in another order (~1e-7 on all-MiniLM-L6-v2's embeddings; 1e-5 allowed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.server.routes.test_families import FAMILIES
from tests.tiny_models import training_texts
from wde import LLM
from wde.layers import packed_linear
from wde.layers.packed_linear import GEMM_ENV, PackedLinear

ATOL = 1e-5

PAIRS = [("a query", "a short text"), ("a query about Debian", "a longer text about Debian packages")]

pytestmark = pytest.mark.skipif(
    not packed_linear._on_x86_with_onednn(), reason="oneDNN's packed linear needs an x86 CPU with oneDNN"
)


def _answers(llm: LLM, model_type: str) -> np.ndarray:
    if model_type == "embedding":
        return np.stack([output.embedding for output in llm.encode(training_texts()[:12])])
    return np.array([output.score for output in llm.score([q for q, _ in PAIRS], [d for _, d in PAIRS])])


def _llm(path: str, gemm: str, monkeypatch: pytest.MonkeyPatch) -> LLM:
    monkeypatch.setenv(GEMM_ENV, gemm)
    return LLM(path, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("architecture", list(FAMILIES))
def test_every_family_answers_alike_on_both_gemms(
    tmp_path: Path, architecture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    save, model_type, _ = FAMILIES[architecture]
    path = str(save(tmp_path / "model"))
    aten, packed = _llm(path, "aten", monkeypatch), _llm(path, "onednn_packed", monkeypatch)
    assert not any(isinstance(m, PackedLinear) for m in aten.engine.runner.model.modules())
    assert any(isinstance(m, PackedLinear) for m in packed.engine.runner.model.modules())
    np.testing.assert_allclose(_answers(packed, model_type), _answers(aten, model_type), atol=ATOL)


def test_default_model_packs_every_block_linear(
    default_model_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = _llm(default_model_path, "onednn_packed", monkeypatch)
    linears = [m for m in packed.engine.runner.model.modules() if isinstance(m, PackedLinear)]
    assert len(linears) == 4 * 6  # fused qkv, attention output, intermediate, output in each of 6 layers
    aten = _llm(default_model_path, "aten", monkeypatch)
    texts = training_texts()[:64]
    got = np.stack([output.embedding for output in packed.encode(texts)])
    expected = np.stack([output.embedding for output in aten.encode(texts)])
    np.testing.assert_allclose(got, expected, atol=ATOL)
