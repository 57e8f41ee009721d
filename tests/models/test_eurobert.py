"""EuroBERT (``EuroBertModel``; ``EuroBertForMaskedLM``, the published checkpoints' architecture, served for
embeddings; ``EuroBertForSequenceClassification`` with each ``classifier_pooling``) against transformers,
sentence-transformers and CrossEncoder on tiny random checkpoints: grouped-query heads of ``head_dim`` !=
hidden / heads, RoPE, bidirectional attention, every bias on (``attention_bias``, ``mlp_bias``), and the
config.json the Hub repos ship (top-level ``rope_theta``, ``auto_map``, ``clf_pooling``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import (
    CPU_BACKEND_NAMES,
    assert_close_to_sentence_transformers,
    backend_refusal,
    hf_last_hidden,
)
from tests.models.test_encoders import embeddings, max_abs_diff, run_wde
from tests.models.tiny_decoders import _save, build_llama_tokenizer
from tests.models.tiny_qwen3 import qwen3_config
from tests.tiny_models import training_texts

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
LOGITS_ATOL = 1e-4  # scores vs transformers' logits
SEED = 61
SEQ_LENS = (5, 1, 9, 2, 9, 40, 3, 17)
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "rust hash crate",
]
PAIRS = [
    ("what is a file carver", "scalpel is a fast file carver that reads a database of header definitions."),
    ("mail server virus scanning", "Clam AntiVirus is an anti-virus toolkit for Unix."),
    ("x", "y"),
]
# the Hub repos' remote-code names (EuroBERT/EuroBERT-210m config.json)
HUB_AUTO_MAP = {
    "AutoConfig": "configuration_eurobert.EuroBertConfig",
    "AutoModel": "modeling_eurobert.EuroBertModel",
    "AutoModelForMaskedLM": "modeling_eurobert.EuroBertForMaskedLM",
}


def save_tiny_eurobert(path: Path, seed: int, architecture: str, **overrides: object) -> Path:
    """A random EuroBERT with every bias on, ``head_dim`` 32 != 64 / 4, and the tiny Llama-style tokenizer
    (``<s>`` 1 and ``</s>`` 2 around every text)."""
    from transformers import EuroBertConfig

    tokenizer = build_llama_tokenizer(training_texts())
    config = EuroBertConfig(
        vocab_size=len(tokenizer),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        mask_token_id=0,
        attention_bias=True,
        mlp_bias=True,
        **{**qwen3_config(head_dim=32), **overrides},
    )
    return _save(path, seed, architecture, config, tokenizer)


def as_published(path: Path) -> Path:
    """config.json as the Hub repos write it: ``model_type`` eurobert with ``auto_map`` to remote code,
    ``rope_theta`` at the top level, the classifier's pooling as ``clf_pooling``."""
    config_path = path / "config.json"
    config = json.loads(config_path.read_text())
    rope = config.pop("rope_parameters")
    config.update(auto_map=HUB_AUTO_MAP, rope_theta=rope["rope_theta"], rope_scaling=None)
    if "classifier_pooling" in config:
        config["clf_pooling"] = config.pop("classifier_pooling")
    config_path.write_text(json.dumps(config))
    return path


def save_mean_pooling_st(hf_dir: Path, path: Path) -> Path:
    """Saved by sentence-transformers as an encoder embedder: Transformer -> Pooling(mean) -> Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(hf_dir))
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling, Normalize()]).save(str(path))
    return path


@torch.inference_mode()
def unpadded_logits(path: Path) -> np.ndarray:
    """transformers' logits of each pair alone: its ``bos`` pooling reads position 0, which the Llama
    tokenizer's left padding would fill with a pad token in a batch."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    return np.array([model(**tokenizer(a, b, return_tensors="pt")).logits[0, 0].item() for a, b in PAIRS])


def token_ids_of(path: Path, seed: int) -> list[list[int]]:
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    return [
        [1, *torch.randint(3, vocab_size, (max(length - 2, 0),), generator=generator).tolist(), 2][:length]
        for length in SEQ_LENS
    ]


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eurobert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_eurobert(tmp_path_factory.mktemp("tiny-eurobert"), SEED, "EuroBertModel")


@pytest.fixture(scope="module")
def published_mlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``EuroBertForMaskedLM`` (``model.`` prefixed, an lm_head with a bias) with the Hub's config.json."""
    path = save_tiny_eurobert(tmp_path_factory.mktemp("tiny-eurobert-mlm"), SEED + 1, "EuroBertForMaskedLM")
    return as_published(path)


@pytest.fixture(scope="module")
def st_dir(published_mlm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_mean_pooling_st(published_mlm_dir, tmp_path_factory.mktemp("st-eurobert") / "model")


@pytest.fixture(scope="module", params=CPU_BACKEND_NAMES)
def st_llm(request: pytest.FixtureRequest, st_dir: Path) -> Iterator[wde.LLM]:
    refusal = backend_refusal(st_dir, request.param)
    if refusal is not None:
        pytest.skip(refusal)
    llm = wde.LLM(str(st_dir), device="cpu", dtype="float32", attention_backend=request.param)
    yield llm
    llm.engine.shutdown()


# ---- the model against transformers, per CPU attention backend ---------------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
def test_last_hidden_state_matches_hf(eurobert_dir: Path, backend_name: str) -> None:
    refusal = backend_refusal(eurobert_dir, backend_name)
    if refusal is not None:  # varlen_cpu on a CPU without its kernel: the selector says why
        assert backend_name == "varlen_cpu"
        pytest.skip(refusal)
    token_ids = token_ids_of(eurobert_dir, seed=1)
    expected = hf_last_hidden(eurobert_dir, token_ids, pad_id=2)
    hidden, _ = run_wde(eurobert_dir, token_ids, backend_name)
    assert hidden.shape == expected.shape
    assert max_abs_diff(hidden, expected) <= FP32_ATOL


def test_attention_is_bidirectional_whatever_config_json_says(eurobert_dir: Path, tmp_path: Path) -> None:
    """``is_causal: true`` in config.json does not make EuroBERT causal (transformers' attention ignores
    it)."""
    import shutil

    causal_dir = tmp_path / "causal-flag"
    shutil.copytree(eurobert_dir, causal_dir)
    config = json.loads((causal_dir / "config.json").read_text())
    (causal_dir / "config.json").write_text(json.dumps({**config, "is_causal": True}))
    token_ids = token_ids_of(eurobert_dir, seed=2)
    plain, _ = run_wde(eurobert_dir, token_ids, "naive")
    flagged, _ = run_wde(causal_dir, token_ids, "naive")
    assert max_abs_diff(plain, flagged) == 0.0


# ---- the LLM API, per backend ------------------------------------------------------------------------------
def test_encode_equals_sentence_transformers(st_llm: wde.LLM, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    assert st_llm.model_config.pooling.method == "mean" and st_llm.model_config.pooling.normalize
    reference = SentenceTransformer(str(st_dir), device="cpu").encode(TEXTS)
    assert_close_to_sentence_transformers(embeddings(st_llm.encode(TEXTS)), reference)


def test_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = embeddings(st_llm.encode(TEXTS))
    for text, vector in zip(TEXTS, batched, strict=True):
        assert max_abs_diff(embeddings(st_llm.encode([text]))[0], vector) <= FP32_ATOL


def test_bare_folder_mean_pools_unnormalized(eurobert_dir: Path) -> None:
    from wde.engine_args import EngineArgs

    config = EngineArgs(model=str(eurobert_dir), device="cpu").create_engine_config().model_config
    assert config.task == "embed"
    assert config.pooling.method == "mean" and not config.pooling.normalize


# ---- the cross-encoder, per classifier pooling -------------------------------------------------------------
@pytest.mark.parametrize("pooling", ["bos", "mean", "late"])
@pytest.mark.parametrize("published", [False, True])
def test_scores_equal_transformers(tmp_path: Path, pooling: str, published: bool) -> None:
    path = save_tiny_eurobert(
        tmp_path / "cls",
        SEED + 2,
        "EuroBertForSequenceClassification",
        classifier_pooling=pooling,
        num_labels=1,
    )
    expected = unpadded_logits(path)  # before the sigmoid
    if published:
        as_published(path)
    llm = wde.LLM(str(path), device="cpu", dtype="float32", score_activation="identity")
    got = np.array([output.score for output in llm.score([q for q, _ in PAIRS], [d for _, d in PAIRS])])
    llm.engine.shutdown()
    assert np.abs(got - expected).max() <= LOGITS_ATOL


@pytest.mark.slow  # int8 compiles its matmuls
def test_int8_close_to_float32(st_dir: Path) -> None:
    """Every block linear in int8 (qkv, o, gate_up, down per layer), embeddings within the tiny models'
    tolerance of float32's."""
    from tests.models.test_int8 import MIN_COSINE_TINY
    from wde.layers.quantization.int8_linear import Int8Linear

    exact = wde.LLM(str(st_dir), device="cpu", dtype="float32")
    int8 = wde.LLM(str(st_dir), device="cpu", dtype="float32", quantization="int8")
    try:
        linears = [m for m in int8.engine.runner.model.modules() if isinstance(m, Int8Linear)]
        assert len(linears) == 4 * qwen3_config()["num_hidden_layers"]
        texts = training_texts()[:16]
        got, expected = embeddings(int8.encode(texts)), embeddings(exact.encode(texts))
        assert (got * expected).sum(axis=1).min() >= MIN_COSINE_TINY  # both normalized
    finally:
        exact.engine.shutdown()
        int8.engine.shutdown()


@pytest.mark.shared_data  # the acceptance text: real documents, not the generated corpus
def test_published_checkpoint_equals_sentence_transformers_on_docs(st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from tests.shared_data import read_texts

    texts = read_texts("docs.jsonl", limit=64)
    llm = wde.LLM(str(st_dir), device="cpu", dtype="float32")
    try:
        got = embeddings(llm.encode(texts))
    finally:
        llm.engine.shutdown()
    assert_close_to_sentence_transformers(got, SentenceTransformer(str(st_dir), device="cpu").encode(texts))
