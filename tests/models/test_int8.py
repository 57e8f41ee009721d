"""``quantization="int8"``: every family loads and answers close to its float32 self; on the real default
model the int8 embeddings (smoothed by a calibration pass at load) keep the ranking (cosine to float32),
each text's embedding does not depend on its batch-mates, and the server reports and serves it.
Tolerances: int8 weights and activations lose ~1% per linear layer; on all-MiniLM-L6-v2 over real text the
mean cosine to float32 is ~0.999, the minimum ~0.997.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.server.conftest import asgi_client
from tests.server.routes.test_families import FAMILIES
from tests.shared_data import read_texts
from tests.tiny_models import training_texts
from wde import LLM, EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.layers.quantization.int8_linear import Int8Linear
from wde.layers.quantization.smoothing import SMOOTHING_ENV

# all-MiniLM-L6-v2, real text, smoothed by the calibration pass (measured over 400 documents: min 0.9972,
# mean 0.9990; without smoothing 0.9961 / 0.9981)
MIN_COSINE_REAL = 0.995
MEAN_COSINE_REAL = 0.998
# tiny random checkpoints (random weights quantize about as well as trained ones; looser for safety)
MIN_COSINE_TINY = 0.98
MAX_SCORE_DIFF_TINY = 0.05  # cross-encoder scores after the sigmoid
# A token's int8 scale never depends on its batch-mates, but attention rounds the last float bit differently
# in a padded length group than alone (~1e-7); an activation on a rounding edge then moves one int8 step (up
# to 1/127 of its token's largest value), which can show as a few 1e-3 in a normalized embedding: the same
# order as int8's own error (min cosine ~0.996 to float32), far below what changes a ranking.
BATCH_TOLERANCE = 1e-2
BATCH_MIN_COSINE = 0.999

PAIRS = [
    ("a query", "a short text"),
    ("a query about Debian", "a longer text about Debian packages"),
    ("x", ""),
]


def _embeddings(llm: LLM, texts: list[str]) -> np.ndarray:
    return np.stack([output.embedding for output in llm.encode(texts)])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def int8_llm(default_model_path: str) -> LLM:
    return LLM(default_model_path, quantization="int8")


@pytest.mark.slow
@pytest.mark.shared_data  # accuracy on real text (the generated test corpus is out of distribution)
def test_default_model_int8_close_to_float32(int8_llm: LLM, default_llm: LLM) -> None:
    texts = read_texts("docs.jsonl", 200)
    cosine = _cosines(_embeddings(int8_llm, texts), _embeddings(default_llm, texts))
    assert cosine.min() >= MIN_COSINE_REAL, f"min cosine {cosine.min():.5f}"
    assert cosine.mean() >= MEAN_COSINE_REAL, f"mean cosine {cosine.mean():.5f}"
    linears = [m for m in int8_llm.engine.runner.model.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 4 * 6  # fused qkv, attention output, intermediate, output in each of 6 layers
    assert all(linear.input_scale is not None for linear in linears)  # every one smoothed at load


@pytest.mark.slow
def test_int8_batch_equals_single(int8_llm: LLM) -> None:
    texts = training_texts()[:24]
    batched = _embeddings(int8_llm, texts)
    singles = np.stack([_embeddings(int8_llm, [text])[0] for text in texts])
    assert np.abs(batched - singles).max() <= BATCH_TOLERANCE
    assert _cosines(batched, singles).min() >= BATCH_MIN_COSINE


@pytest.mark.slow
@pytest.mark.parametrize("architecture", list(FAMILIES))
def test_every_family_runs_int8(tmp_path: Path, architecture: str) -> None:
    save, model_type, _ = FAMILIES[architecture]
    path = str(save(tmp_path / "model"))
    exact, int8 = LLM(path, device="cpu"), LLM(path, device="cpu", quantization="int8")
    assert any(isinstance(m, Int8Linear) for m in int8.engine.runner.model.modules())
    if model_type == "embedding":
        texts = training_texts()[:16]
        cosine = _cosines(_embeddings(int8, texts), _embeddings(exact, texts))
        assert cosine.min() >= MIN_COSINE_TINY, f"min cosine {cosine.min():.5f}"
    else:
        got = np.array([o.score for o in int8.score([q for q, _ in PAIRS], [d for _, d in PAIRS])])
        expected = np.array([o.score for o in exact.score([q for q, _ in PAIRS], [d for _, d in PAIRS])])
        assert np.abs(got - expected).max() <= MAX_SCORE_DIFF_TINY


@pytest.mark.parametrize("smoothing", ["1", "0"])
def test_a_load_smooths_every_block_linear_unless_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smoothing: str
) -> None:
    monkeypatch.setenv(SMOOTHING_ENV, smoothing)
    save, _, _ = FAMILIES["BertModel"]
    int8 = LLM(str(save(tmp_path / "model")), device="cpu", quantization="int8")
    linears = [m for m in int8.engine.runner.model.modules() if isinstance(m, Int8Linear)]
    assert linears and all((linear.input_scale is not None) == (smoothing == "1") for linear in linears)


def test_int8_is_refused_where_it_does_not_run(default_model_path: str) -> None:
    with pytest.raises(ValueError, match="pass --dtype float32"):
        EngineArgs(model=default_model_path, quantization="int8", dtype="bfloat16").create_engine_config()
    with pytest.raises(ValueError, match="quantization 'int4' is not one of"):
        EngineArgs(model=default_model_path, quantization="int4").create_engine_config()


@pytest.mark.slow
@pytest.mark.anyio
async def test_server_reports_and_serves_int8(default_model_path: str, int8_llm: LLM) -> None:
    engine = AsyncLLMEngine(EngineArgs(model=default_model_path, quantization="int8"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        async with asgi_client(engine) as (client, _):
            assert (await client.get("/info")).json()["quantization"] == "int8"
            response = await client.post("/embed", json={"inputs": ["a short text", "another one"]})
            assert response.status_code == 200, response.text
            expected = _embeddings(int8_llm, ["a short text", "another one"])
            assert np.abs(np.array(response.json()) - expected).max() <= BATCH_TOLERANCE
    finally:
        engine.shutdown(timeout=60)
