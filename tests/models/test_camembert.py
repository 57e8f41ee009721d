"""CamemBERT (``CamembertModel``, ``CamembertForSequenceClassification``: served by the XLM-RoBERTa classes)
against transformers, sentence-transformers and CrossEncoder, on tiny random checkpoints (tiny_camembert.py):
positions from pad + 1, CamemBERT's special-token ids and pair template, ``roberta.`` prefixed heads."""

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
from tests.models.tiny_camembert import MAX_POSITIONS, SEED, save_tiny_camembert
from tests.tiny_models import reference_logits
from wde.engine_args import EngineArgs
from wde.model_folder.registry import MODEL_REGISTRY

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
SCORE_ATOL = 1e-4  # scores vs CrossEncoder / transformers
SEQ_LENS = (5, 1, 9, 2, 9, 64, 3, 17)  # mixed lengths, an equal pair, one at the 64 usable positions
TEXTS = [
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "a",
    "Embeddings map sentences to vectors that can be compared with a dot product.",
    "",
    " ".join(["the package provides libraries and command line tools"] * 12),  # truncated to 64 tokens
]
QUERY = "what is a file carver"
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    " ".join(["the package provides libraries, documentation and command line tools"] * 12),
]


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def camembert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_camembert(tmp_path_factory.mktemp("tiny-camembert"))


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_camembert(
        tmp_path_factory.mktemp("tiny-camembert-ce"),
        seed=SEED + 1,
        architecture="CamembertForSequenceClassification",
        num_labels=1,
    )


@pytest.fixture(scope="module")
def st_dir(camembert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Saved by sentence-transformers as sentence-camembert models are: Transformer -> Pooling(mean)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    transformer = Transformer(str(camembert_dir), max_seq_length=MAX_POSITIONS - 2)
    path = tmp_path_factory.mktemp("st-camembert") / "model"
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling]).save(str(path))
    return path


@pytest.fixture(scope="module", params=CPU_BACKEND_NAMES)
def backend_name(request: pytest.FixtureRequest, camembert_dir: Path) -> str:
    """Every CPU attention backend; one that cannot run here is skipped with the selector's reason."""
    refusal = backend_refusal(camembert_dir, request.param)
    if refusal is not None:
        pytest.skip(refusal)
    return str(request.param)


@pytest.fixture(scope="module")
def st_llm(st_dir: Path, backend_name: str) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(st_dir), device="cpu", dtype="float32", attention_backend=backend_name)
    yield llm
    llm.engine.shutdown()


@pytest.fixture(scope="module")
def ce_llm(cross_encoder_dir: Path, backend_name: str) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(cross_encoder_dir), device="cpu", dtype="float32", attention_backend=backend_name)
    yield llm
    llm.engine.shutdown()


# ---- the model against transformers ------------------------------------------------------------------------
def test_last_hidden_state_matches_hf(camembert_dir: Path, backend_name: str) -> None:
    config = json.loads((camembert_dir / "config.json").read_text())
    bos_id, eos_id, pad_id = config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]
    generator = torch.Generator().manual_seed(SEED)
    token_ids = [
        [
            bos_id,
            *torch.randint(7, config["vocab_size"] - 1, (max(n - 2, 0),), generator=generator).tolist(),
            eos_id,
        ][:n]
        for n in SEQ_LENS
    ]
    expected = hf_last_hidden(camembert_dir, token_ids, pad_id)
    hidden, _ = run_wde(camembert_dir, token_ids, backend_name)
    assert max_abs_diff(hidden, expected) <= FP32_ATOL


def test_registered_as_roberta_with_reserved_positions(camembert_dir: Path, cross_encoder_dir: Path) -> None:
    assert MODEL_REGISTRY["CamembertModel"].reserved_positions({"pad_token_id": 1}) == 2
    for path, task in ((camembert_dir, "embed"), (cross_encoder_dir, "score")):
        config = EngineArgs(model=str(path), device="cpu").create_engine_config().model_config
        assert config.task == task and config.max_model_len == MAX_POSITIONS - 2


def test_tokenizer_matches_transformers(camembert_dir: Path) -> None:
    """CamemBERT's ids (``<s>`` 5, ``</s>`` 6) and pair template ``<s> A </s></s> B </s>``."""
    from transformers import AutoTokenizer

    from wde.tokenizer import Tokenizer

    reference = AutoTokenizer.from_pretrained(str(camembert_dir))
    ours = Tokenizer.from_pretrained(camembert_dir, max_length=MAX_POSITIONS - 2)
    for text in TEXTS[:4]:
        assert ours.encode_batch([text])[0].token_ids == reference(text)["input_ids"]
    pair = ours.encode_batch([(QUERY, DOCS[0])])[0].token_ids
    assert pair == reference(QUERY, DOCS[0])["input_ids"]
    assert pair[0] == reference.bos_token_id and pair.count(reference.eos_token_id) == 3


# ---- the LLM API, per backend ------------------------------------------------------------------------------
def test_encode_equals_sentence_transformers(st_llm: wde.LLM, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(st_dir), device="cpu")
    assert_close_to_sentence_transformers(embeddings(st_llm.encode(TEXTS)), reference.encode(TEXTS))


def test_encode_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = embeddings(st_llm.encode(TEXTS))
    singles = np.stack([embeddings(st_llm.encode([text]))[0] for text in TEXTS])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


def test_scores_equal_cross_encoder_and_transformers(ce_llm: wde.LLM, cross_encoder_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    max_length = MAX_POSITIONS - 2
    logits = reference_logits(cross_encoder_dir, [(QUERY, doc) for doc in DOCS], max_length)[:, 0]
    raw = np.array([float(out.scores[0]) for out in ce_llm.score(QUERY, DOCS, raw_scores=True)])
    assert max_abs_diff(raw, logits) <= SCORE_ATOL
    expected = CrossEncoder(str(cross_encoder_dir), device="cpu", max_length=max_length).predict(
        [(QUERY, doc) for doc in DOCS]
    )
    scores = np.array([out.score for out in ce_llm.score(QUERY, DOCS)])
    assert max_abs_diff(scores, expected) <= SCORE_ATOL


def test_scores_batch_equals_single(ce_llm: wde.LLM) -> None:
    batched = np.array([out.score for out in ce_llm.score(QUERY, DOCS)])
    singles = np.array([ce_llm.score(QUERY, doc)[0].score for doc in DOCS])
    assert max_abs_diff(batched, singles) <= FP32_ATOL
