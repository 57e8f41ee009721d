"""Qwen2 (gte-Qwen2, stella: ``Qwen2Model`` / ``Qwen2ForCausalLM``, last-token pooling) against transformers
and sentence-transformers, on tiny random checkpoints (tiny_decoders.py): q/k/v biases without q/k norms,
grouped-query heads of ``head_dim`` != hidden / heads, RoPE, the ``use_sliding_window`` /
``max_window_layers`` rule, and ``"is_causal": false`` (bidirectional, as transformers' masks read it)."""

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
    config_changed,
    hf_last_hidden,
    save_last_token_st,
)
from tests.models.test_encoders import embeddings, max_abs_diff, run_wde
from tests.models.tiny_decoders import QWEN2_SEED, save_tiny_qwen2
from wde.engine_args import EngineArgs
from wde.layers.attention.backends import varlen_kernel

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
# varlen_cpu sums each row in 8- or 16-wide vector parts (its exp2 ~1e-7 relative): measured 1.04e-5 from
# transformers (and from naive) on the bidirectional checkpoint, whose hidden values reach 3.9
VARLEN_ATOL = 2e-5
MIN_SWITCH_EFFECT = 1e-2  # a window or the causal mask must move outputs far past the tolerance
SEQ_LENS = (5, 1, 9, 2, 9, 40, 3, 17)  # mixed lengths, an equal pair, one past the sliding window
SLIDING_WINDOW = 4
PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages\nQuery: ", "document": ""}
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "",
    "rust hash crate",
]
# why varlen_cpu passes over each checkpoint (its kernel attends bidirectionally, without a window)
CAUSAL_REFUSAL = "no causal mask"


def token_ids_of(path: Path, seed: int) -> list[list[int]]:
    """Random tokens past the special ones, each sequence ending in EOS as gte-Qwen2's tokenizer ends it."""
    config = json.loads((path / "config.json").read_text())
    generator = torch.Generator().manual_seed(seed)
    return [
        [
            *torch.randint(8, config["vocab_size"], (length - 1,), generator=generator).tolist(),
            config["eos_token_id"],
        ]
        for length in SEQ_LENS
    ]


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="module")
def causal_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As gte-Qwen2-1.5B ships: ``Qwen2ForCausalLM`` (``model.`` prefixed) with tied embeddings."""
    return save_tiny_qwen2(
        tmp_path_factory.mktemp("tiny-qwen2-lm"),
        seed=QWEN2_SEED + 1,
        architecture="Qwen2ForCausalLM",
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="module")
def sliding_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layers from index 1 on attend to the last SLIDING_WINDOW keys only (use_sliding_window)."""
    return save_tiny_qwen2(
        tmp_path_factory.mktemp("tiny-qwen2-sliding"),
        seed=QWEN2_SEED + 2,
        use_sliding_window=True,
        sliding_window=SLIDING_WINDOW,
        max_window_layers=1,
    )


@pytest.fixture(scope="module")
def bidirectional_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``is_causal: false`` (heads of 32, which the varlen kernel's vectors divide: varlen_cpu runs it)."""
    return save_tiny_qwen2(
        tmp_path_factory.mktemp("tiny-qwen2-bidirectional"), seed=QWEN2_SEED + 3, is_causal=False, head_dim=32
    )


@pytest.fixture(scope="module")
def hf_hidden() -> dict[Path, tuple[list[list[int]], torch.Tensor]]:
    """(token ids, transformers' last hidden state) per checkpoint, computed once."""
    return {}


@pytest.fixture(scope="module")
def st_dir(causal_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_last_token_st(causal_lm_dir, tmp_path_factory.mktemp("st-qwen2") / "model", PROMPTS)


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
        ("qwen2_dir", CAUSAL_REFUSAL),
        ("causal_lm_dir", CAUSAL_REFUSAL),
        ("sliding_dir", CAUSAL_REFUSAL),
        ("bidirectional_dir", None),
    ],
)
def test_last_hidden_state_matches_hf(
    request: pytest.FixtureRequest,
    hf_hidden: dict[Path, tuple[list[list[int]], torch.Tensor]],
    dir_fixture: str,
    varlen_refusal: str | None,
    backend_name: str,
) -> None:
    path: Path = request.getfixturevalue(dir_fixture)
    refusal = backend_refusal(path, backend_name)
    if backend_name == "varlen_cpu" and (varlen_kernel.unavailable_reason() or varlen_refusal):
        # the selector passes varlen_cpu over and says why: this CPU, or a layer it cannot honour
        assert refusal is not None and (varlen_kernel.unavailable_reason() or varlen_refusal) in refusal
        return
    assert refusal is None
    if path not in hf_hidden:
        token_ids = token_ids_of(path, seed=len(dir_fixture))
        hf_hidden[path] = token_ids, hf_last_hidden(path, token_ids, token_ids[0][-1])
    token_ids, expected = hf_hidden[path]
    hidden, _ = run_wde(path, token_ids, backend_name)
    assert hidden.shape == expected.shape
    assert max_abs_diff(hidden, expected) <= (VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL)


@pytest.mark.parametrize(
    ("dir_fixture", "switch"),
    [("sliding_dir", {"use_sliding_window": False}), ("bidirectional_dir", {"is_causal": True})],
)
def test_config_switches_change_the_output(
    request: pytest.FixtureRequest, dir_fixture: str, switch: dict
) -> None:
    """The window and ``is_causal`` are honoured, not ignored: the other setting on the same weights
    differs."""
    path: Path = request.getfixturevalue(dir_fixture)
    token_ids = token_ids_of(path, seed=3)
    as_saved, _ = run_wde(path, token_ids, "naive")
    with config_changed(path, **switch):
        switched, _ = run_wde(path, token_ids, "naive")
    assert max_abs_diff(as_saved, switched) >= MIN_SWITCH_EFFECT


def test_head_dim_and_grouped_query_heads(qwen2_dir: Path) -> None:
    config = json.loads((qwen2_dir / "config.json").read_text())
    assert config["head_dim"] * config["num_attention_heads"] != config["hidden_size"]
    assert config["num_key_value_heads"] < config["num_attention_heads"]


# ---- the LLM API, per backend ------------------------------------------------------------------------------
def test_encode_equals_sentence_transformers(st_llm: wde.LLM, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    assert st_llm.model_config.pooling.method == "last" and st_llm.model_config.pooling.normalize
    reference = SentenceTransformer(str(st_dir), device="cpu")
    for prompt_name in ("query", None):
        got = embeddings(st_llm.encode(TEXTS, prompt_name=prompt_name))
        assert_close_to_sentence_transformers(got, reference.encode(TEXTS, prompt_name=prompt_name))


def test_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = embeddings(st_llm.encode(TEXTS, prompt_name="query"))
    for text, vector in zip(TEXTS, batched, strict=True):
        single = embeddings(st_llm.encode([text], prompt_name="query"))[0]
        assert max_abs_diff(single, vector) <= FP32_ATOL


def test_bare_folder_pools_the_last_token_normalized(qwen2_dir: Path) -> None:
    """No sentence-transformers metadata: a Qwen2 folder embeds as gte-Qwen2 does (last token, L2)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen2_dir))
    model = AutoModel.from_pretrained(str(qwen2_dir), attn_implementation="eager").eval()
    with torch.inference_mode():
        expected = [
            torch.nn.functional.normalize(
                model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0, -1], dim=-1
            )
            for text in TEXTS
        ]
    llm = wde.LLM(str(qwen2_dir), device="cpu", dtype="float32")
    try:
        assert llm.model_config.pooling.method == "last" and llm.model_config.pooling.normalize
        assert (
            max_abs_diff(embeddings(llm.encode(TEXTS)), np.stack([e.numpy() for e in expected])) <= FP32_ATOL
        )
    finally:
        llm.engine.shutdown()


def test_causal_lm_serves_embed_only(causal_lm_dir: Path) -> None:
    config = EngineArgs(model=str(causal_lm_dir), device="cpu").create_engine_config().model_config
    assert config.task == "embed"
    with pytest.raises(ValueError, match="score"):
        EngineArgs(model=str(causal_lm_dir), device="cpu", task="score").create_engine_config()
