"""ModernBERT (embedding model and sequence classifier) against transformers, sentence-transformers and
CrossEncoder, on tiny random checkpoints with both global and sliding-window layers (tiny_modernbert.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import assert_close_to_sentence_transformers
from tests.models.test_encoders import engine_config, max_abs_diff, random_token_ids, run_wde
from tests.models.tiny_modernbert import LOCAL_ATTENTION, MAX_POSITIONS, save_tiny_modernbert
from tests.tiny_models import reference_logits
from wde.model_folder.registry import MODEL_REGISTRY
from wde.models.modernbert import FULL, SLIDING, layer_types, rope_theta

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
LOGITS_ATOL = 1e-4  # scores vs CrossEncoder
MIN_WINDOW_EFFECT = 1e-2  # the local window must move outputs far past the tolerance
SEED = 120
BACKEND_NAMES = ("naive", "torch_sdpa")
# Mixed lengths around the local window (4 each side): 1-3 tokens, 9 (= one full window), 10, an equal pair,
# and one at max_model_len.
SEQ_LENS = (5, 1, 9, 10, 2, 9, MAX_POSITIONS, 3, 17, 33)
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "rust hash crate",
]
QUERIES = ["what is a file carver", "mail server virus scanning"]
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    # longer than 64 tokens together with any query: exercises pair truncation
    " ".join(["the package provides libraries, documentation and command line tools"] * 6),
]


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No biases, config.json as transformers v5 writes it (layer_types, rope_parameters)."""
    return save_tiny_modernbert(tmp_path_factory.mktemp("tiny-modernbert"), seed=SEED)


@pytest.fixture(scope="module")
def hub_style_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bias on, config.json as the Hub's ModernBERT checkpoints spell it."""
    return save_tiny_modernbert(
        tmp_path_factory.mktemp("tiny-modernbert-hub"),
        seed=SEED + 1,
        hub_style_config=True,
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
    )


@pytest.fixture(scope="module", params=("modernbert", "hub_style"))
def model_dir(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"{request.param}_dir")


@pytest.fixture(scope="module")
def token_ids(modernbert_dir: Path) -> list[list[int]]:
    return random_token_ids(modernbert_dir, list(SEQ_LENS), seed=SEED)


@pytest.fixture(scope="module", params=("cls", "mean"))
def classifier_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    biased = request.param == "mean"  # the mean-pooling head also has its biases on
    return save_tiny_modernbert(
        tmp_path_factory.mktemp(f"tiny-modernbert-ce-{request.param}"),
        seed=SEED + 2 + biased,
        architecture="ModernBertForSequenceClassification",
        num_labels=1,
        classifier_pooling=request.param,
        classifier_bias=biased,
        norm_bias=biased,
    )


@pytest.fixture(scope="module")
def modernbert_llm(modernbert_dir: Path) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(modernbert_dir), device="cpu", dtype="float32", pooling="mean", normalize=False)
    yield llm
    llm.engine.shutdown()


# ---- helpers -----------------------------------------------------------------------------------------------
@torch.inference_mode()
def run_hf(path: Path, token_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention on the right-padded batch: (last hidden state, mask of real tokens)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32).eval()
    max_len = max(map(len, token_ids))
    input_ids = torch.full((len(token_ids), max_len), model.config.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = True
    return model(input_ids=input_ids, attention_mask=mask.long()).last_hidden_state, mask


def all_pairs() -> list[tuple[str, str]]:
    return [(query, doc) for query in QUERIES for doc in DOCS]


# ---- the model against transformers ------------------------------------------------------------------------
@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
def test_last_hidden_state_matches_transformers(model_dir: Path, backend_name: str) -> None:
    token_ids = random_token_ids(model_dir, list(SEQ_LENS), seed=SEED)
    hf_hidden, hf_mask = run_hf(model_dir, token_ids)
    ours, _ = run_wde(model_dir, token_ids, backend_name)  # [num_tokens, hidden_size]
    assert max_abs_diff(ours, hf_hidden[hf_mask]) <= FP32_ATOL


def test_the_local_window_matters(tmp_path: Path, modernbert_dir: Path, token_ids: list[list[int]]) -> None:
    """Guard on the test itself: with a window wider than any sequence, outputs move far past the tolerance
    (so the comparison above would catch a window off by one or ignored), and ours follow the wider window."""
    wide = shutil.copytree(modernbert_dir, tmp_path / "wide")
    config = json.loads((wide / "config.json").read_text())
    config["local_attention"] = 4 * MAX_POSITIONS
    (wide / "config.json").write_text(json.dumps(config))
    for local_attention in (LOCAL_ATTENTION - 2, LOCAL_ATTENTION + 2):  # one token less / more on each side
        config["local_attention"] = local_attention
        (wide / "config.json").write_text(json.dumps(config))
        narrow_hidden, mask = run_hf(wide, token_ids)
        assert (
            max_abs_diff(run_hf(modernbert_dir, token_ids)[0][mask], narrow_hidden[mask]) > MIN_WINDOW_EFFECT
        )
    config["local_attention"] = 4 * MAX_POSITIONS
    (wide / "config.json").write_text(json.dumps(config))
    wide_hidden, mask = run_hf(wide, token_ids)
    assert max_abs_diff(run_hf(modernbert_dir, token_ids)[0][mask], wide_hidden[mask]) > MIN_WINDOW_EFFECT
    ours, _ = run_wde(wide, token_ids, "torch_sdpa")
    assert max_abs_diff(ours, wide_hidden[mask]) <= FP32_ATOL


def test_layer_kinds_and_rope_bases_from_either_config_spelling(modernbert_dir: Path, hub_style_dir: Path):
    for path in (modernbert_dir, hub_style_dir):
        config = json.loads((path / "config.json").read_text())
        assert layer_types(config) == [FULL, SLIDING, FULL, SLIDING]
        assert (rope_theta(config, FULL), rope_theta(config, SLIDING)) == (160_000.0, 100.0)
    defaults = {"num_hidden_layers": 4}
    assert layer_types(defaults) == [FULL, SLIDING, SLIDING, FULL]  # global every 3rd layer by default
    assert (rope_theta(defaults, FULL), rope_theta(defaults, SLIDING)) == (160_000.0, 10_000.0)
    with pytest.raises(ValueError, match="rope_scaling"):
        rope_theta({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, FULL)
    with pytest.raises(ValueError, match="layer_types"):
        layer_types({"num_hidden_layers": 2, "layer_types": ["full_attention"]})


def test_registered_with_its_tasks() -> None:
    assert MODEL_REGISTRY["ModernBertModel"].tasks == ("embed",)
    assert MODEL_REGISTRY["ModernBertForSequenceClassification"].tasks == ("score",)


# ---- through LLM -------------------------------------------------------------------------------------------
def test_llm_batch_equals_single_and_transformers(
    modernbert_llm: wde.LLM, modernbert_dir: Path, token_ids: list[list[int]]
) -> None:
    assert modernbert_llm.engine.runner.attn_backend_cls.name == "torch_sdpa"  # the CPU selector's choice
    prompts = [{"prompt_token_ids": ids} for ids in token_ids]
    batched = np.stack([out.embedding for out in modernbert_llm.encode(prompts)])
    singles = np.stack([modernbert_llm.encode(prompt)[0].embedding for prompt in prompts])
    assert max_abs_diff(batched, singles) <= FP32_ATOL
    hidden, mask = run_hf(modernbert_dir, token_ids)
    hf_mean = (hidden * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    assert max_abs_diff(batched, hf_mean) <= FP32_ATOL


def test_saved_by_sentence_transformers_equals_encode(tmp_path: Path, modernbert_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(modernbert_dir))
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    path = tmp_path / "st-modernbert"
    SentenceTransformer(modules=[transformer, pooling, Normalize()]).save(str(path))
    expected = SentenceTransformer(str(path), device="cpu").encode(TEXTS)
    llm = wde.LLM(str(path), device="cpu")
    try:
        got = np.stack([output.embedding for output in llm.encode(TEXTS)])
    finally:
        llm.engine.shutdown()
    assert_close_to_sentence_transformers(got, expected)


def test_classifier_matches_transformers_and_cross_encoder(classifier_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    pairs = all_pairs()
    queries, docs = [a for a, _ in pairs], [b for _, b in pairs]
    llm = wde.LLM(str(classifier_dir), device="cpu")
    try:
        assert llm.model_config.task == "score"
        assert engine_config(classifier_dir).model_config.max_model_len == MAX_POSITIONS
        logits = np.stack([out.scores for out in llm.score(queries, docs, raw_scores=True)])
        scores = np.array([out.score for out in llm.score(QUERIES[0], DOCS)])
        batched = np.array([out.score for out in llm.score(queries, docs)])
        singles = np.array([llm.score(a, b)[0].score for a, b in pairs])
    finally:
        llm.engine.shutdown()
    assert max_abs_diff(logits, reference_logits(classifier_dir, pairs, MAX_POSITIONS)) <= FP32_ATOL
    cross_encoder = CrossEncoder(str(classifier_dir), device="cpu", max_length=MAX_POSITIONS)
    expected = cross_encoder.predict(pairs, convert_to_numpy=True)
    assert max_abs_diff(batched, expected) <= LOGITS_ATOL
    assert max_abs_diff(scores, expected[: len(DOCS)]) <= LOGITS_ATOL
    assert max_abs_diff(batched, singles) <= FP32_ATOL
