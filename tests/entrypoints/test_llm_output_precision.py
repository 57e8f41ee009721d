"""Quantized embedding outputs (``precision``) against sentence-transformers' ``quantize_embeddings`` on the
same float embeddings and the same calibration set: exact for binary / ubinary, int8 / uint8 within one
bucket (the issue's bound; the arithmetic is the same float32 numpy, so they are exact here too). Over HTTP:
``/embed`` and ``/v1/embeddings`` (ints, or base64 of the bytes). Without a calibration file, the bundled
set's ranges: the codes of quantize_embeddings with those sentences as its calibration embeddings.
Real weights (the bundled all-MiniLM-L6-v2) on real text: the shared Debian descriptions, else inline text.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import wde
from tests.tiny_models import training_texts
from wde.calibration import load_calibration_texts
from wde.entrypoints.output_precision import Calibration

NUM_QUERIES = 20
NUM_CALIBRATION = 100


@pytest.fixture(scope="module")
def texts() -> tuple[list[str], list[str]]:
    """(calibration texts, held-out texts to embed)."""
    corpus = training_texts()
    return corpus[NUM_QUERIES : NUM_QUERIES + NUM_CALIBRATION], corpus[:NUM_QUERIES]


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory: pytest.TempPathFactory, texts: tuple[list[str], list[str]]) -> Path:
    path = tmp_path_factory.mktemp("calibration") / "calibration.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts[0]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def llm(calibration_file: Path) -> wde.LLM:
    return wde.LLM(calibration_file=str(calibration_file))


def reference(embeddings: np.ndarray, precision: str, calibration: np.ndarray) -> np.ndarray:
    from sentence_transformers.util.quantization import quantize_embeddings

    return quantize_embeddings(embeddings, precision=precision, calibration_embeddings=calibration)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
@pytest.mark.parametrize("options", [{}, {"dimensions": 128}], ids=["full", "matryoshka"])
def test_equals_quantize_embeddings(
    llm: wde.LLM, texts: tuple[list[str], list[str]], precision: str, options: dict
) -> None:
    calibration_texts, queries = texts
    floats = np.stack([output.embedding for output in llm.encode(queries, **options)])
    calibration = np.stack([output.embedding for output in llm.encode(calibration_texts, **options)])
    got = np.stack([output.embedding for output in llm.encode(queries, precision=precision, **options)])
    expected = reference(floats, precision, calibration)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if precision.endswith("binary"):
        assert np.array_equal(got, expected)
    else:
        assert int(np.abs(got.astype(np.int16) - expected.astype(np.int16)).max()) <= 1


def test_ranges_are_computed_once_per_option_set(llm: wde.LLM, texts: tuple[list[str], list[str]]) -> None:
    runner = llm.engine.runner
    forward, num_calls = runner.execute_model, [0]

    def counted(batch):
        num_calls[0] += 1
        return forward(batch)

    runner.execute_model = counted
    try:
        llm.encode(texts[1][:2], precision="int8", dimensions=64)  # calibrates for dimensions=64
        first = num_calls[0]
        llm.encode(texts[1][:2], precision="uint8", dimensions=64)  # the same ranges serve uint8
    finally:
        runner.execute_model = forward
    assert num_calls[0] - first == 1  # only the two texts ran


def test_int8_without_calibration_file_uses_the_bundled_set(
    default_llm: wde.LLM, texts: tuple[list[str], list[str]]
) -> None:
    queries = texts[1][:8]
    floats = np.stack([output.embedding for output in default_llm.encode(queries)])
    bundled = np.stack([output.embedding for output in default_llm.encode(Calibration.bundled().texts)])
    for precision in ("int8", "uint8"):
        got = np.stack([output.embedding for output in default_llm.encode(queries, precision=precision)])
        expected = reference(floats, precision, bundled)
        assert int(np.abs(got.astype(np.int16) - expected.astype(np.int16)).max()) <= 1
    alone = default_llm.encode(queries[3], precision="int8")[0].embedding
    assert np.array_equal(alone, default_llm.encode(queries, precision="int8")[3].embedding)


def test_bad_precision_options(llm: wde.LLM) -> None:
    with pytest.raises(ValueError, match="precision 'int4' is not one of"):
        llm.encode("text", precision="int4")


def test_calibration_file_formats(tmp_path: Path) -> None:
    (tmp_path / "texts.txt").write_text("one\n\ntwo\nthree\n", encoding="utf-8")
    assert load_calibration_texts(tmp_path / "texts.txt") == ["one", "two", "three"]
    with pytest.raises(ValueError, match="does not exist"):
        load_calibration_texts(tmp_path / "missing.jsonl")


@pytest.mark.anyio
async def test_http_precision(calibration_file: Path, texts: tuple[list[str], list[str]]) -> None:
    from tests.server.conftest import asgi_client
    from wde import EngineArgs
    from wde.entrypoints.async_llm_engine import AsyncLLMEngine

    engine = AsyncLLMEngine(EngineArgs(calibration_file=str(calibration_file)))
    engine.start()
    engine.wait_until_ready(timeout=120)
    queries = texts[1][:4]
    try:
        reference_llm = wde.LLM(calibration_file=str(calibration_file))
        int8 = [output.embedding for output in reference_llm.encode(queries, precision="int8")]
        ubinary = [output.embedding for output in reference_llm.encode(queries, precision="ubinary")]
        async with asgi_client(engine) as (client, _):
            embed = await client.post("/embed", json={"inputs": queries, "precision": "int8"})
            openai = await client.post(
                "/v1/embeddings", json={"input": queries, "precision": "ubinary", "encoding_format": "base64"}
            )
            openai_ints = await client.post("/v1/embeddings", json={"input": queries, "precision": "uint8"})
            bad = await client.post("/embed", json={"inputs": queries, "precision": "int4"})
    finally:
        engine.shutdown(timeout=60)
    assert embed.status_code == 200, embed.text
    assert [np.asarray(row, dtype=np.int8).tolist() for row in embed.json()] == [row.tolist() for row in int8]
    for item, expected in zip(openai.json()["data"], ubinary, strict=True):
        assert np.array_equal(np.frombuffer(base64.b64decode(item["embedding"]), dtype=np.uint8), expected)
    assert all(0 <= value <= 255 for item in openai_ints.json()["data"] for value in item["embedding"])
    assert bad.status_code == 422 and "precision" in bad.json()["error"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
