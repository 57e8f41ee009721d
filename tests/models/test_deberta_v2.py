"""DeBERTa-v2 / v3 (``DebertaV2Model`` embeddings, ``DebertaV2ForSequenceClassification`` cross-encoders
such as mxbai-rerank-v1) against transformers and CrossEncoder, on tiny random checkpoints saved as those
libraries save them.

The v3 layout (mxbai-rerank): shared attention keys, c2p + p2c, LayerNorm-ed relative embeddings, no absolute
positions, no token types. Relative distances are bucketed (8 buckets, log scale up to 16) while sequences run
to ~100 tokens, so exact, logarithmic and clamped buckets all occur. A second, v2-style checkpoint covers the
other switches: separate pos_key_proj / pos_query_proj, ``pos_att_type`` as the old ``"c2p|p2c"`` string, no
bucketing (plain clamp at 16), absolute positions, token types, a hidden ``embedding_size`` projection and the
convolution after the first layer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import hf_last_hidden
from tests.models.test_encoders import max_abs_diff, run_wde
from tests.tiny_models import _randomize_, reference_logits, training_texts
from wde.models.deberta_v2 import (
    ConvLayer,
    DebertaV2ForSequenceClassification,
    DebertaV2Model,
    DisentangledSelfAttention,
    make_log_bucket_position,
)

SEED = 140
VOCAB_SIZE = 400  # target size of the trained Unigram vocabulary
MAX_POSITIONS = 128
CE_MAX_LEN = 64  # the cross-encoder's tokenizer model_max_length
FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
ST_ATOL = 1e-4
CPU_BACKENDS = ("naive", "torch_sdpa")
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]  # DeBERTa-v3's ids 0-3; [MASK] goes last
# mixed lengths: 1 token, short ones, an equal pair, ~40 (past max_relative_positions) and the longest
SEQ_LENS = (5, 1, 40, 2, 9, 9, 100, 3, 37)

V3_CONFIG: dict[str, Any] = {
    "relative_attention": True,
    "position_buckets": 8,
    "max_relative_positions": 16,
    "pos_att_type": ["p2c", "c2p"],
    "share_att_key": True,
    "norm_rel_ebd": "layer_norm",
    "position_biased_input": False,
    "type_vocab_size": 0,
}
V2_CONFIG: dict[str, Any] = {
    "relative_attention": True,
    "position_buckets": -1,
    "max_relative_positions": 16,
    "pos_att_type": "c2p|p2c",
    "share_att_key": False,
    "norm_rel_ebd": "none",
    "position_biased_input": True,
    "type_vocab_size": 2,
    "embedding_size": 24,
    "conv_kernel_size": 3,
    "conv_act": "gelu",
}

QUERY = "what is a file carver"
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    " ".join(["the package provides libraries, documentation and command line tools"] * 12),  # truncated
]


# ---- tiny checkpoints ------------------------------------------------------------------------------------
def build_deberta_v2_tokenizer(model_max_length: int) -> Any:
    """A small trained Unigram wrapped as DeBERTa-v3's tokenizer: ``[CLS] A [SEP] B [SEP]``, types 0 / 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import DebertaV2Tokenizer

    trainer = trainers.UnigramTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, unk_token="[UNK]", show_progress=False
    )
    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.train_from_iterator(training_texts(), trainer)
    vocab = [(piece, score) for piece, score in json.loads(raw.to_str())["model"]["vocab"]]
    if [piece for piece, _ in vocab[:4]] != SPECIALS:
        raise AssertionError(f"the trained vocabulary starts with {vocab[:4]}, not {SPECIALS}")
    return DebertaV2Tokenizer(vocab=[*vocab, ("[MASK]", 0.0)], model_max_length=model_max_length)


def save_tiny_deberta_v2(
    path: Path, seed: int, architecture: str, model_max_length: int, **overrides: Any
) -> Path:
    import transformers
    from transformers import DebertaV2Config

    tokenizer = build_deberta_v2_tokenizer(model_max_length)
    config = DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=0,
        **overrides,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    _randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=("v3", "v2"))
def deberta_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    overrides = V3_CONFIG if request.param == "v3" else V2_CONFIG
    path = tmp_path_factory.mktemp(f"tiny-deberta-{request.param}")
    return save_tiny_deberta_v2(path, SEED, "DebertaV2Model", MAX_POSITIONS, **overrides)


@pytest.fixture(scope="module")
def deberta_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-deberta-ce")
    return save_tiny_deberta_v2(
        path, SEED + 1, "DebertaV2ForSequenceClassification", CE_MAX_LEN, num_labels=1, **V3_CONFIG
    )


@pytest.fixture(scope="module")
def token_ids(deberta_dir: Path) -> list[list[int]]:
    """``[CLS] random... [SEP]``; the 1-token sequence is ``[CLS]`` alone."""
    generator = torch.Generator().manual_seed(SEED)
    vocab_size = json.loads((deberta_dir / "config.json").read_text())["vocab_size"]
    sequences = []
    for length in SEQ_LENS:
        middle = torch.randint(len(SPECIALS), vocab_size, (max(length - 2, 0),), generator=generator).tolist()
        sequences.append([1, *middle, 2] if length > 1 else [1])
    return sequences


def run_hf(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return hf_last_hidden(path, token_ids, 0)


@pytest.fixture(scope="module")
def hf_hidden(deberta_dir: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return run_hf(deberta_dir, token_ids)


# ---- relative positions ----------------------------------------------------------------------------------
def test_buckets_equal_transformers() -> None:
    from transformers.models.deberta_v2 import modeling_deberta_v2

    distance = torch.arange(-300, 301)[None, :] - torch.arange(0, 5)[:, None]
    for bucket_size, max_position in ((8, 16), (256, 512), (32, 128)):
        expected = modeling_deberta_v2.make_log_bucket_position(distance, bucket_size, max_position)
        assert torch.equal(make_log_bucket_position(distance, bucket_size, max_position), expected)


def test_relative_terms_matter(
    deberta_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard against a test that passes with c2p / p2c ignored: dropping them moves outputs far."""
    monkeypatch.setattr(DisentangledSelfAttention, "relative_scores", lambda self, q, *args: q.new_zeros(()))
    hidden, _ = run_wde(deberta_dir, token_ids, "naive")
    assert max_abs_diff(hidden, hf_hidden) > 1e-2


def test_even_conv_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="conv_kernel_size 4 is even"):
        ConvLayer({"hidden_size": 8, "conv_kernel_size": 4})


# ---- DebertaV2Model against transformers -----------------------------------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_last_hidden_state_matches_hf(
    deberta_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, backend_name: str
) -> None:
    hidden, _ = run_wde(deberta_dir, token_ids, backend_name)
    assert hidden.shape == hf_hidden.shape
    assert max_abs_diff(hidden, hf_hidden) <= FP32_ATOL


def test_batch_equals_single(deberta_dir: Path, token_ids: list[list[int]]) -> None:
    batched, _ = run_wde(deberta_dir, token_ids, "torch_sdpa")
    singles = torch.cat([run_wde(deberta_dir, [ids], "torch_sdpa")[0] for ids in token_ids])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


# ---- DebertaV2ForSequenceClassification ------------------------------------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_cross_encoder_matches_transformers_and_cross_encoder(
    deberta_ce_dir: Path, backend_name: str
) -> None:
    from sentence_transformers import CrossEncoder

    pairs = [(QUERY, doc) for doc in DOCS]
    llm = wde.LLM(str(deberta_ce_dir), device="cpu", dtype="float32", attention_backend=backend_name)
    try:
        assert llm.model_config.architecture == "DebertaV2ForSequenceClassification"
        assert llm.model_config.task == "score" and llm.model_config.max_model_len == CE_MAX_LEN
        outputs = llm.score(QUERY, DOCS, raw_scores=True)
        assert outputs[-1].num_tokens == CE_MAX_LEN, "the long pair is truncated"
        assert len({output.num_tokens for output in outputs}) == len(DOCS), "mixed lengths"
        logits = np.stack([output.scores for output in outputs])
        assert max_abs_diff(logits, reference_logits(deberta_ce_dir, pairs, CE_MAX_LEN)) <= FP32_ATOL

        expected = CrossEncoder(str(deberta_ce_dir), device="cpu", max_length=CE_MAX_LEN).predict(pairs)
        scores = np.array([output.score for output in llm.score(QUERY, DOCS)])
        assert max_abs_diff(scores, expected) <= ST_ATOL
        singles = np.array([llm.score(QUERY, doc)[0].score for doc in DOCS])
        assert max_abs_diff(scores, singles) <= FP32_ATOL
    finally:
        llm.engine.shutdown()


def test_registry_serves_both_architectures() -> None:
    from wde.model_folder.registry import MODEL_REGISTRY
    from wde.worker.model_loader import model_class

    assert model_class(MODEL_REGISTRY["DebertaV2Model"]) is DebertaV2Model
    classifier = MODEL_REGISTRY["DebertaV2ForSequenceClassification"]
    assert model_class(classifier) is DebertaV2ForSequenceClassification and classifier.tasks == ("score",)
