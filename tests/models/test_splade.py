"""SPLADE sparse embeddings (``BertForMaskedLM`` / ``DistilBertForMaskedLM`` + sentence-transformers'
``SpladePooling``) against ``SparseEncoder.encode`` on held-out real text: tiny random masked-LM checkpoints
with the bundled MiniLM WordPiece vocabulary (30,522 ids), saved by the installed sentence-transformers.

Tolerances (float32 on CPU, same weights): the same non-zero token ids, weights within ``ATOL`` = 1e-4
(the issue's bound; the measured differences are ~1e-6); batch == single within ``FP32_ATOL``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.test_distilbert import save_tiny_distilbert
from tests.tiny_models import SEED, save_tiny_bert, training_texts
from wde.entrypoints.tasks import OutputNotSupportedError
from wde.outputs import SparseEmbeddingOutput

ATOL = 1e-4  # wde vs SparseEncoder.encode
FP32_ATOL = 1e-5  # batch vs single, mixed batch vs alone
NUM_TEXTS = 24
TOP_K = 16


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Real text (the shared Debian descriptions, else inline sentences) the random weights never saw, an
    empty string, and one longer than the tiny model's 64 positions (cut as sentence-transformers cuts)."""
    corpus = training_texts()
    return [*corpus[:NUM_TEXTS], "", " ".join(corpus[NUM_TEXTS : NUM_TEXTS + 4])]


def save_splade(path: Path, hf_dir: Path, modules: str = "transformer", **pooling: object) -> Path:
    """A SparseEncoder over ``hf_dir`` (a *ForMaskedLM checkpoint), built from modules and saved:
    ``modules="transformer"`` is the >= 5.4 way (Transformer with transformer_task="fill-mask"),
    ``"mlm_transformer"`` the legacy MLMTransformer module."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling, Transformer

    if modules == "mlm_transformer":
        transformer = MLMTransformer(str(hf_dir))
    else:
        transformer = Transformer(str(hf_dir), transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling(**pooling)], device="cpu").save(str(path))
    return path


@pytest.fixture(scope="module")
def bert_mlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(
        tmp_path_factory.mktemp("tiny-bert-mlm"), seed=SEED + 60, architecture="BertForMaskedLM"
    )


@pytest.fixture(scope="module")
def splade_dir(bert_mlm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_splade(tmp_path_factory.mktemp("splade") / "model", bert_mlm_dir, pooling_strategy="max")


@pytest.fixture(scope="module")
def splade_llm(splade_dir: Path) -> wde.LLM:
    return wde.LLM(str(splade_dir), device="cpu")


def reference(path: Path, texts: list[str], **kwargs: object) -> list[tuple[np.ndarray, np.ndarray]]:
    """SparseEncoder.encode: per text its (non-zero token ids ascending, weights)."""
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(path), device="cpu")
    embeddings = model.encode(texts, convert_to_tensor=True, convert_to_sparse_tensor=False, **kwargs)
    rows = []
    for row in embeddings:
        ids = torch.nonzero(row).flatten()
        rows.append((ids.numpy(), row[ids].numpy()))
    return rows


def assert_same_sparse(
    got: list[SparseEmbeddingOutput], expected: list[tuple[np.ndarray, np.ndarray]]
) -> float:
    """Same non-zero ids in the same order, weights within ATOL; returns the largest difference."""
    assert len(got) == len(expected)
    worst = 0.0
    for position, (output, (ids, values)) in enumerate(zip(got, expected, strict=True)):
        assert output.indices.dtype == np.int64 and output.values.dtype == np.float32
        assert np.array_equal(output.indices, ids), (
            f"text {position}: {len(output.indices)} ids vs {len(ids)}; differing: "
            f"{sorted(set(output.indices.tolist()) ^ set(ids.tolist()))[:10]}"
        )
        if len(ids):
            worst = max(worst, float(np.abs(output.values - values).max()))
    assert worst <= ATOL, f"max abs diff {worst:.2e}"
    return worst


# ---- sentence-transformers' SparseEncoder ----------------------------------------------------------------
def test_sparse_equals_sparse_encoder(splade_llm: wde.LLM, splade_dir: Path, texts: list[str]) -> None:
    assert splade_llm.model_config.outputs == ("sparse",)
    got = splade_llm.encode(texts)  # sparse is this model's own output kind
    assert all(isinstance(output, SparseEmbeddingOutput) for output in got)
    worst = assert_same_sparse(got, reference(splade_dir, texts))
    print(f"max abs diff vs SparseEncoder: {worst:.2e}")


def test_top_k_equals_max_active_dims(splade_llm: wde.LLM, splade_dir: Path, texts: list[str]) -> None:
    got = splade_llm.encode(texts, output="sparse", max_active_dims=TOP_K)
    assert all(len(output.indices) == TOP_K for output in got)
    assert_same_sparse(got, reference(splade_dir, texts, max_active_dims=TOP_K))


def test_batch_equals_single(splade_llm: wde.LLM, texts: list[str]) -> None:
    batch = splade_llm.encode(texts)
    for text, output in zip(texts[:6], batch, strict=False):
        (single,) = splade_llm.encode(text)
        assert np.array_equal(single.indices, output.indices)
        np.testing.assert_allclose(single.values, output.values, atol=FP32_ATOL)


@pytest.mark.parametrize("chunk_tokens", [1, 7, 64])
def test_chunked_logits_equal_whole(splade_llm: wde.LLM, texts: list[str], chunk_tokens: int) -> None:
    """The masked-LM logits are pooled a chunk of tokens at a time; chunks that cut sequences anywhere
    (1 token, mid-sequence, several sequences) give the same vectors as one chunk for the whole batch."""
    head = splade_llm.engine.runner.pooler.heads["sparse"]
    saved = head.chunk_tokens
    try:
        head.chunk_tokens = 1_000_000
        whole = splade_llm.encode(texts[:8])
        head.chunk_tokens = chunk_tokens
        chunked = splade_llm.encode(texts[:8])
    finally:
        head.chunk_tokens = saved
    for a, b in zip(whole, chunked, strict=True):
        assert np.array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.values, b.values, atol=FP32_ATOL)


@pytest.mark.parametrize(
    ("modules", "pooling"),
    [
        ("mlm_transformer", {"pooling_strategy": "max"}),
        ("transformer", {"pooling_strategy": "sum"}),
        ("transformer", {"pooling_strategy": "max", "activation_function": "log1p_relu"}),
    ],
)
def test_saved_variants_equal_sparse_encoder(
    tmp_path: Path, bert_mlm_dir: Path, texts: list[str], modules: str, pooling: dict
) -> None:
    path = save_splade(tmp_path / "model", bert_mlm_dir, modules, **pooling)
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.sparse.pooling == pooling["pooling_strategy"]
    assert_same_sparse(llm.encode(texts[:8]), reference(path, texts[:8]))


def test_saved_max_active_dims_is_the_default(tmp_path: Path, bert_mlm_dir: Path, texts: list[str]) -> None:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

    path = tmp_path / "model"
    transformer = Transformer(str(bert_mlm_dir), transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling()], max_active_dims=8, device="cpu").save(str(path))
    saved = json.loads((path / "config_sentence_transformers.json").read_text())
    if "max_active_dims" not in saved:  # 6.0.x saves no max_active_dims (6.2 does)
        pytest.skip(
            f"sentence-transformers {saved['__version__']['sentence_transformers']} saves no max_active_dims"
        )
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.sparse.max_active_dims == 8
    got = llm.encode(texts[:4])
    assert all(len(output.indices) == 8 for output in got)
    assert_same_sparse(got, reference(path, texts[:4]))
    assert len(llm.encode(texts[0], max_active_dims=3)[0].indices) == 3  # the request's limit wins


def test_distilbert_splade_equals_sparse_encoder(tmp_path: Path, texts: list[str]) -> None:
    hf_dir = save_tiny_distilbert(tmp_path / "hf", SEED + 61, "DistilBertForMaskedLM")
    path = save_splade(tmp_path / "model", hf_dir)
    llm = wde.LLM(str(path), device="cpu")
    assert llm.model_config.architecture == "DistilBertForMaskedLM"
    assert_same_sparse(llm.encode(texts[:10]), reference(path, texts[:10]))


# ---- a plain masked-LM folder: sparse by default (as SparseEncoder loads it), dense on request ----------
def test_plain_masked_lm_folder(bert_mlm_dir: Path, texts: list[str]) -> None:
    llm = wde.LLM(str(bert_mlm_dir), device="cpu")
    assert llm.model_config.outputs == ("sparse", "dense")
    assert_same_sparse(llm.encode(texts[:6]), reference(bert_mlm_dir, texts[:6]))
    dense = llm.encode(texts[:2], output="dense")
    assert dense[0].embedding.shape == (32,)
    np.testing.assert_allclose(np.linalg.norm(dense[0].embedding), 1.0, atol=1e-6)  # CLS + normalize


def test_mixed_output_kinds_in_one_batch(bert_mlm_dir: Path, texts: list[str]) -> None:
    """Requests of both kinds in the same forward pass get what each asked for."""
    llm = wde.LLM(str(bert_mlm_dir), device="cpu")
    sparse_alone = llm.encode(texts[:4], output="sparse")
    dense_alone = llm.encode(texts[4:8], output="dense")
    engine = llm.engine
    engine.add_requests(["s0", "s1", "s2", "s3"], texts[:4], wde.PoolingParams(output="sparse"))
    engine.add_requests(["d0", "d1", "d2", "d3"], texts[4:8], wde.PoolingParams(output="dense"))
    outputs = {}
    num_steps = 0
    while engine.has_unfinished_requests():
        num_steps += 1
        outputs.update({output.request_id: output for output in engine.step()})
    assert num_steps == 1, "expected one batch holding both kinds"
    for index, alone in enumerate(sparse_alone):
        assert np.array_equal(outputs[f"s{index}"].indices, alone.indices)
        np.testing.assert_allclose(outputs[f"s{index}"].values, alone.values, atol=FP32_ATOL)
    for index, alone in enumerate(dense_alone):
        np.testing.assert_allclose(outputs[f"d{index}"].embedding, alone.embedding, atol=FP32_ATOL)


# ---- decoding, and asking a model for what it does not produce ------------------------------------------
def test_decode_gives_the_tokens(splade_llm: wde.LLM, splade_dir: Path) -> None:
    from sentence_transformers import SparseEncoder

    (output,) = splade_llm.encode(["Debian is a free operating system"], decode=True)
    vocabulary = splade_llm.engine.tokenizer.untruncated()
    assert output.tokens == [vocabulary.id_to_token(i) for i in output.indices.tolist()]
    model = SparseEncoder(str(splade_dir), device="cpu")
    expected = model.decode(model.encode("Debian is a free operating system"), top_k=10)
    got = output.decoded()[:10]
    assert [token for token, _ in got] == [token for token, _ in expected]
    np.testing.assert_allclose([w for _, w in got], [w for _, w in expected], atol=ATOL)
    assert output.to_dict()[int(output.indices[0])] == pytest.approx(float(output.values[0]))


def test_dense_only_model_refuses_sparse(default_llm) -> None:
    with pytest.raises(OutputNotSupportedError, match=r"does not produce sparse output.*serves: dense"):
        default_llm.encode("a text", output="sparse")


def test_sparse_only_model_refuses_dense(splade_llm: wde.LLM) -> None:
    with pytest.raises(OutputNotSupportedError, match=r"does not produce dense output.*serves: sparse"):
        splade_llm.encode("a text", output="dense")


def test_score_and_rerank_equal_sparse_encoder_similarity(
    splade_llm: wde.LLM, splade_dir: Path, texts: list[str]
) -> None:
    """A SPLADE model scores by the dot product of sparse vectors, as SparseEncoder.similarity."""
    from sentence_transformers import SparseEncoder

    query, documents = "Debian packages for mail servers", texts[:8]
    model = SparseEncoder(str(splade_dir), device="cpu")
    expected = model.similarity(model.encode([query]), model.encode(documents)).to_dense()[0].numpy()
    got = np.array([output.score for output in splade_llm.score(query, documents)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=ATOL)
    ranked = splade_llm.rerank(query, documents, top_n=3)
    assert [result.index for result in ranked] == np.argsort(-expected, kind="stable")[:3].tolist()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output": "colbert"}, "output 'colbert' is not one of"),
        ({"max_active_dims": 0}, "max_active_dims must be a positive int"),
        ({"dimensions": 8}, "dimensions and normalize apply to dense output"),
        ({"normalize": True}, "dimensions and normalize apply to dense output"),
    ],
)
def test_bad_sparse_options(splade_llm: wde.LLM, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        splade_llm.encode("a text", **kwargs)


def test_max_active_dims_on_dense_is_refused(default_llm) -> None:
    with pytest.raises(ValueError, match="max_active_dims applies to sparse output"):
        default_llm.encode("a text", max_active_dims=4)


def test_splade_on_a_base_model_is_refused(tmp_path: Path) -> None:
    """SpladePooling over a checkpoint without its masked-LM head names what is needed."""
    import json
    import shutil

    hf_dir = save_tiny_bert(tmp_path / "hf", seed=SEED + 62)
    (tmp_path / "model").mkdir()
    for item in hf_dir.iterdir():
        shutil.copy(item, tmp_path / "model" / item.name)
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "",
            "type": "sentence_transformers.base.modules.transformer.Transformer",
        },
        {
            "idx": 1,
            "name": "1",
            "path": "1_SpladePooling",
            "type": "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling",
        },
    ]
    (tmp_path / "model" / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "model" / "1_SpladePooling").mkdir()
    (tmp_path / "model" / "1_SpladePooling" / "config.json").write_text('{"pooling_strategy": "max"}')
    with pytest.raises(
        ValueError, match=r"asks for sparse output, which BertModel cannot produce.*ForMaskedLM"
    ):
        wde.LLM(str(tmp_path / "model"), device="cpu")
