"""Mistral (e5-mistral, SFR-Embedding-Mistral: ``MistralModel`` / ``MistralForCausalLM``, last-token pooling)
against transformers and sentence-transformers, on tiny random checkpoints (tiny_decoders.py): no biases, no
q/k norms, grouped-query heads of ``head_dim`` != hidden / heads, RoPE, ``sliding_window`` on every layer
whenever it is set (causal: the last ``w`` keys; with ``"is_causal": false``: ``w`` on either side)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import wde
from tests.models.family_checks import (
    CPU_BACKEND_NAMES,
    assert_close_to_sentence_transformers,
    backend_refusal,
    config_changed,
    hf_last_hidden,
    save_last_token_st,
)
from tests.models.test_encoders import embeddings, max_abs_diff, run_wde
from tests.models.tiny_decoders import MISTRAL_SEED, save_tiny_mistral
from wde.engine_args import EngineArgs
from wde.layers.attention.backends import varlen_kernel

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
MIN_WINDOW_EFFECT = 1e-2  # the window must move outputs far past the tolerance
SEQ_LENS = (5, 1, 9, 2, 9, 40, 3, 17)  # mixed lengths, an equal pair, several past the window
SLIDING_WINDOW = 4
# e5-mistral's query prompt (its sentence-transformers config has one per task)
PROMPTS = {"web_search_query": "Instruct: Given a web search query, retrieve relevant passages\nQuery: "}
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "",
    "rust hash crate",
]


def token_ids_of(path: Path, seed: int) -> list[list[int]]:
    """``<s>``, random tokens past the special ones, ``</s>``, as e5-mistral tokenizes (a 1-token one:
    ``<s>``)."""
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    return [
        [1, *torch.randint(3, vocab_size, (max(length - 2, 0),), generator=generator).tolist(), 2][:length]
        for length in SEQ_LENS
    ]


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Full attention (``sliding_window`` null)."""
    return save_tiny_mistral(tmp_path_factory.mktemp("tiny-mistral"))


@pytest.fixture(scope="module")
def windowed_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``MistralForCausalLM`` (``model.`` prefixed) with ``sliding_window`` on every layer (e5-mistral's
    config.json sets 4096)."""
    return save_tiny_mistral(
        tmp_path_factory.mktemp("tiny-mistral-lm"),
        seed=MISTRAL_SEED + 1,
        architecture="MistralForCausalLM",
        sliding_window=SLIDING_WINDOW,
    )


@pytest.fixture(scope="module")
def bidirectional_window_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``is_causal: false`` with a window: keys within SLIDING_WINDOW positions on either side."""
    return save_tiny_mistral(
        tmp_path_factory.mktemp("tiny-mistral-bidirectional"),
        seed=MISTRAL_SEED + 2,
        sliding_window=SLIDING_WINDOW,
        is_causal=False,
    )


@pytest.fixture(scope="module")
def hf_hidden() -> dict[Path, tuple[list[list[int]], torch.Tensor]]:
    """(token ids, transformers' last hidden state) per checkpoint, computed once."""
    return {}


@pytest.fixture(scope="module")
def st_dir(windowed_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_last_token_st(windowed_lm_dir, tmp_path_factory.mktemp("st-mistral") / "model", PROMPTS)


@pytest.fixture(scope="module", params=CPU_BACKEND_NAMES)
def backend_name(request: pytest.FixtureRequest, st_dir: Path) -> str:
    """Every CPU attention backend; one that cannot run here (varlen_cpu: causal layers) is skipped with the
    selector's reason."""
    refusal = backend_refusal(st_dir, request.param)
    if refusal is not None:
        pytest.skip(refusal)
    return str(request.param)


@pytest.fixture(scope="module")
def st_llm(st_dir: Path, backend_name: str) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(st_dir), device="cpu", dtype="float32", attention_backend=backend_name)
    yield llm
    llm.engine.shutdown()


# ---- the model against transformers, per CPU attention backend ---------------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize(
    ("dir_fixture", "varlen_refusal"),
    [
        ("mistral_dir", "no causal mask"),
        ("windowed_lm_dir", "no causal mask"),
        ("bidirectional_window_dir", "no sliding window"),
    ],
)
def test_last_hidden_state_matches_hf(
    request: pytest.FixtureRequest,
    hf_hidden: dict[Path, tuple[list[list[int]], torch.Tensor]],
    dir_fixture: str,
    varlen_refusal: str,
    backend_name: str,
) -> None:
    path: Path = request.getfixturevalue(dir_fixture)
    refusal = backend_refusal(path, backend_name)
    if backend_name == "varlen_cpu":
        # the selector passes varlen_cpu over and says why: this CPU, or a layer it cannot honour
        assert refusal is not None and (varlen_kernel.unavailable_reason() or varlen_refusal) in refusal
        return
    assert refusal is None
    if path not in hf_hidden:
        token_ids = token_ids_of(path, seed=len(dir_fixture))
        hf_hidden[path] = token_ids, hf_last_hidden(path, token_ids, pad_id=2)
    token_ids, expected = hf_hidden[path]
    hidden, _ = run_wde(path, token_ids, backend_name)
    assert hidden.shape == expected.shape
    assert max_abs_diff(hidden, expected) <= FP32_ATOL


@pytest.mark.parametrize("dir_fixture", ["windowed_lm_dir", "bidirectional_window_dir"])
def test_sliding_window_changes_the_output(request: pytest.FixtureRequest, dir_fixture: str) -> None:
    """The window is honoured, not ignored: full attention on the same weights differs past the window."""
    path: Path = request.getfixturevalue(dir_fixture)
    token_ids = token_ids_of(path, seed=3)
    windowed, _ = run_wde(path, token_ids, "naive")
    with config_changed(path, sliding_window=None):
        full, _ = run_wde(path, token_ids, "naive")
    assert max_abs_diff(windowed, full) >= MIN_WINDOW_EFFECT


# ---- the LLM API, per backend ------------------------------------------------------------------------------
def test_tokenizer_adds_bos_and_eos(st_dir: Path) -> None:
    """wde's tokenizer gives transformers' ids: ``<s> ... </s>``, whose ``</s>`` last-token pooling reads."""
    from transformers import AutoTokenizer

    from wde.tokenizer import Tokenizer

    reference = AutoTokenizer.from_pretrained(str(st_dir))
    ours = Tokenizer.from_pretrained(st_dir, max_length=256)
    for text in TEXTS:
        expected = reference(text)["input_ids"]
        assert expected[0] == 1 and expected[-1] == 2
        assert ours.encode_batch([text])[0].token_ids == expected


def test_encode_equals_sentence_transformers(st_llm: wde.LLM, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    assert st_llm.model_config.pooling.method == "last" and st_llm.model_config.pooling.normalize
    reference = SentenceTransformer(str(st_dir), device="cpu")
    for prompt_name in ("web_search_query", None):
        got = embeddings(st_llm.encode(TEXTS, prompt_name=prompt_name))
        assert_close_to_sentence_transformers(got, reference.encode(TEXTS, prompt_name=prompt_name))


def test_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = embeddings(st_llm.encode(TEXTS, prompt_name="web_search_query"))
    for text, vector in zip(TEXTS, batched, strict=True):
        single = embeddings(st_llm.encode([text], prompt_name="web_search_query"))[0]
        assert max_abs_diff(single, vector) <= FP32_ATOL


def test_bare_folder_pools_the_last_token_normalized(mistral_dir: Path, windowed_lm_dir: Path) -> None:
    """No sentence-transformers metadata: e5-mistral's pooling (last token, L2), the embed task only."""
    for path in (mistral_dir, windowed_lm_dir):
        config = EngineArgs(model=str(path), device="cpu").create_engine_config().model_config
        assert config.task == "embed"
        assert config.pooling.method == "last" and config.pooling.normalize
