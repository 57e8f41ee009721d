"""DistilBERT (``DistilBertModel`` embeddings, ``DistilBertForSequenceClassification`` cross-encoders) against
transformers, sentence-transformers and CrossEncoder, on tiny random checkpoints saved as those libraries
save them (config keys ``dim`` / ``hidden_dim`` / ``n_heads`` / ``n_layers`` / ``activation``, weights
under ``transformer.layer.N.attention.q_lin`` ...), with the bundled MiniLM WordPiece vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import assert_close_to_sentence_transformers, hf_last_hidden
from tests.models.test_encoders import max_abs_diff, run_wde
from tests.tiny_models import _randomize_, reference_logits
from wde.engine_args import EngineArgs, default_model_path
from wde.models.distilbert import DistilBertModel

SEED = 140
DIM = 32
MAX_POSITIONS = 64
FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
ST_ATOL = 1e-4
ST_MAX_SEQ_LENGTH = 24
CPU_BACKENDS = ("naive", "torch_sdpa")
SEQ_LENS = (5, 1, 9, 2, 9, 64, 3, 17)  # 1 token, an equal pair, the full table
CLS_ID, SEP_ID, PAD_ID = 101, 102, 0
FIRST_ID = 999  # random token ids past [unused*] and the special tokens

TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix",
    "scalpel",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "the same length",
    "the same length",
]
QUERY = "what is a file carver"
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    " ".join(["the package provides libraries, documentation and command line tools"] * 12),  # truncated
]


# ---- tiny checkpoints ------------------------------------------------------------------------------------
def save_tiny_distilbert(path: Path, seed: int, architecture: str, **overrides) -> Path:
    """A random DistilBERT and a DistilBertTokenizer over the bundled BERT uncased vocabulary."""
    import transformers
    from transformers import DistilBertConfig, DistilBertTokenizer

    bert_vocab = (Path(default_model_path()) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = DistilBertTokenizer(
        vocab={token: i for i, token in enumerate(bert_vocab)}, model_max_length=MAX_POSITIONS
    )
    config = DistilBertConfig(
        vocab_size=len(bert_vocab),
        dim=DIM,
        hidden_dim=37,
        n_heads=4,
        n_layers=2,
        max_position_embeddings=MAX_POSITIONS,
        **overrides,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    _randomize_(model, seed)
    with torch.no_grad():  # _randomize_ centres only BERT-named LayerNorm scales on 1
        for name, param in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                param.add_(1.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def distilbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_distilbert(tmp_path_factory.mktemp("tiny-distilbert"), SEED, "DistilBertModel")


@pytest.fixture(scope="module")
def distilbert_st_dir(distilbert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(distilbert_dir), max_seq_length=ST_MAX_SEQ_LENGTH)
    modules = [transformer, Pooling(DIM, "mean"), Normalize()]
    path = tmp_path_factory.mktemp("tiny-distilbert-st") / "model"
    SentenceTransformer(modules=modules).save(str(path))
    return path


@pytest.fixture(scope="module")
def distilbert_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder with the other options: ReLU FFN, sinusoidal positions (stored in the checkpoint)."""
    return save_tiny_distilbert(
        tmp_path_factory.mktemp("tiny-distilbert-ce"),
        SEED + 1,
        "DistilBertForSequenceClassification",
        num_labels=1,
        activation="relu",
        sinusoidal_pos_embds=True,
    )


@pytest.fixture(scope="module")
def token_ids() -> list[list[int]]:
    """``[CLS] random... [SEP]``; the 1-token sequence is ``[CLS]`` alone."""
    generator = torch.Generator().manual_seed(SEED)
    sequences = []
    for length in SEQ_LENS:
        middle = torch.randint(FIRST_ID, 30522, (max(length - 2, 0),), generator=generator).tolist()
        sequences.append([CLS_ID, *middle, SEP_ID] if length > 1 else [CLS_ID])
    return sequences


def run_hf(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return hf_last_hidden(path, token_ids, PAD_ID)


@pytest.fixture(scope="module")
def hf_hidden(distilbert_dir: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return run_hf(distilbert_dir, token_ids)


@pytest.fixture(scope="module")
def st_llm(distilbert_st_dir: Path) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(distilbert_st_dir), device="cpu", dtype="float32")
    yield llm
    llm.engine.shutdown()


# ---- DistilBertModel against transformers ----------------------------------------------------------------
def test_engine_config_from_local_folder(distilbert_dir: Path) -> None:
    model_config = EngineArgs(model=str(distilbert_dir)).create_engine_config().model_config
    assert model_config.architecture == "DistilBertModel" and model_config.task == "embed"
    assert model_config.max_model_len == MAX_POSITIONS
    assert (model_config.hidden_size, model_config.intermediate_size) == (DIM, 37)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_last_hidden_state_matches_hf(
    distilbert_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, backend_name: str
) -> None:
    hidden, _ = run_wde(distilbert_dir, token_ids, backend_name)
    assert hidden.shape == hf_hidden.shape
    assert max_abs_diff(hidden, hf_hidden) <= FP32_ATOL


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_batch_equals_single(distilbert_dir: Path, token_ids: list[list[int]], backend_name: str) -> None:
    batched, _ = run_wde(distilbert_dir, token_ids, backend_name)
    singles = torch.cat([run_wde(distilbert_dir, [ids], backend_name)[0] for ids in token_ids])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


# ---- sentence-transformers -------------------------------------------------------------------------------
def test_encode_equals_sentence_transformers(distilbert_st_dir: Path, st_llm: wde.LLM) -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(distilbert_st_dir), device="cpu").encode(TEXTS)
    outputs = st_llm.encode(TEXTS)
    assert st_llm.model_config.max_model_len == ST_MAX_SEQ_LENGTH
    assert max(output.num_tokens for output in outputs) == ST_MAX_SEQ_LENGTH, "the long text is truncated"
    got = np.stack([output.embedding for output in outputs])
    assert_close_to_sentence_transformers(got, expected)


def test_llm_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = np.stack([output.embedding for output in st_llm.encode(TEXTS)])
    singles = np.stack([st_llm.encode(text)[0].embedding for text in TEXTS])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


# ---- DistilBertForSequenceClassification -----------------------------------------------------------------
def test_cross_encoder_matches_transformers_and_cross_encoder(distilbert_ce_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    pairs = [(QUERY, doc) for doc in DOCS]
    llm = wde.LLM(str(distilbert_ce_dir), device="cpu", dtype="float32")
    assert llm.model_config.architecture == "DistilBertForSequenceClassification"
    assert llm.model_config.task == "score" and llm.model_config.max_model_len == MAX_POSITIONS
    outputs = llm.score(QUERY, DOCS, raw_scores=True)
    assert outputs[-1].num_tokens == MAX_POSITIONS, "the long pair is truncated"
    logits = np.stack([output.scores for output in outputs])
    assert max_abs_diff(logits, reference_logits(distilbert_ce_dir, pairs, MAX_POSITIONS)) <= FP32_ATOL

    expected = CrossEncoder(str(distilbert_ce_dir), device="cpu", max_length=MAX_POSITIONS).predict(pairs)
    scores = np.array([output.score for output in llm.score(QUERY, DOCS)])
    assert max_abs_diff(scores, expected) <= ST_ATOL
    singles = np.array([llm.score(QUERY, doc)[0].score for doc in DOCS])
    assert max_abs_diff(scores, singles) <= FP32_ATOL
    llm.engine.shutdown()


def test_registry_serves_both_architectures() -> None:
    from wde.model_folder.registry import MODEL_REGISTRY
    from wde.worker.model_loader import model_class

    assert model_class(MODEL_REGISTRY["DistilBertModel"]) is DistilBertModel
    assert MODEL_REGISTRY["DistilBertForSequenceClassification"].tasks == ("score",)
