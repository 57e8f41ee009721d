"""Qwen3 (Qwen3-Embedding: ``Qwen3Model`` / ``Qwen3ForCausalLM``, last-token pooling) against transformers and
sentence-transformers, on tiny random checkpoints (tiny_qwen3.py): grouped-query heads, ``head_dim`` !=
hidden / heads, q/k norms, RoPE; config.json as transformers v5 writes it and as the Hub's Qwen3 checkpoints
spell it (top-level ``rope_theta``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import wde
from tests.models.family_checks import config_changed, hf_last_hidden
from tests.models.test_encoders import max_abs_diff, run_wde
from tests.models.tiny_qwen3 import EOS, SEED, save_tiny_qwen3
from wde.engine_args import EngineArgs
from wde.models.qwen3 import rope_theta

FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
ST_MIN_COSINE = 0.99999
ST_ATOL = 1e-4
MIN_WINDOW_EFFECT = 1e-2  # the sliding window must move outputs far past the tolerance
BACKEND_NAMES = ("naive", "torch_sdpa")
SEQ_LENS = (5, 1, 9, 2, 9, 40, 3, 17)  # mixed lengths, an equal pair, one past the sliding window
SLIDING_WINDOW = 4
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "
TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 3,
    "",
    "rust hash crate",
]


# ---- helpers -----------------------------------------------------------------------------------------------
def eos_id(path: Path) -> int:
    return json.loads((path / "config.json").read_text())["eos_token_id"]


def random_token_ids(path: Path, seed: int) -> list[list[int]]:
    """Random tokens past the special ones, each sequence ending in EOS as Qwen3-Embedding's tokenizer ends
    it."""
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    return [
        [*torch.randint(8, vocab_size, (length - 1,), generator=generator).tolist(), eos_id(path)]
        for length in SEQ_LENS
    ]


def run_hf(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return hf_last_hidden(path, token_ids, eos_id(path))


def save_st(hf_dir: Path, path: Path) -> Path:
    """Saved by sentence-transformers as Qwen3-Embedding is: last-token pooling, Normalize, prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(hf_dir))
    pooling = Pooling(transformer.get_embedding_dimension(), "lasttoken")
    model = SentenceTransformer(
        modules=[transformer, pooling, Normalize()], prompts={"query": QUERY_PROMPT, "document": ""}
    )
    model.save(str(path))
    return path


def embeddings(outputs: list[wde.EmbeddingOutput]) -> np.ndarray:
    return np.stack([output.embedding for output in outputs])


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), seed=SEED)


@pytest.fixture(scope="module")
def causal_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``Qwen3ForCausalLM`` (``model.`` prefixed, tied lm_head) with config.json as the Hub spells it:
    top-level rope_theta, rope_scaling null."""
    path = save_tiny_qwen3(
        tmp_path_factory.mktemp("tiny-qwen3-lm"),
        seed=SEED + 1,
        architecture="Qwen3ForCausalLM",
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 50.0},
    )
    config = json.loads((path / "config.json").read_text())
    del config["rope_parameters"]
    config.update(rope_theta=50.0, rope_scaling=None)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def sliding_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layers from index 1 on attend to the last SLIDING_WINDOW keys only (use_sliding_window)."""
    return save_tiny_qwen3(
        tmp_path_factory.mktemp("tiny-qwen3-sliding"),
        seed=SEED + 2,
        use_sliding_window=True,
        sliding_window=SLIDING_WINDOW,
        max_window_layers=1,
    )


@pytest.fixture(scope="module")
def st_dir(qwen3_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_st(qwen3_dir, tmp_path_factory.mktemp("st-qwen3") / "model")


@pytest.fixture(scope="module")
def st_llm(st_dir: Path) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(st_dir), device="cpu", dtype="float32")
    yield llm
    llm.engine.shutdown()


# ---- the model against transformers ------------------------------------------------------------------------
@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
@pytest.mark.parametrize("dir_fixture", ["qwen3_dir", "causal_lm_dir", "sliding_dir"])
def test_last_hidden_state_matches_hf(
    request: pytest.FixtureRequest, dir_fixture: str, backend_name: str
) -> None:
    path: Path = request.getfixturevalue(dir_fixture)
    token_ids = random_token_ids(path, seed=len(dir_fixture))
    expected = run_hf(path, token_ids)
    hidden, _ = run_wde(path, token_ids, backend_name)
    assert hidden.shape == expected.shape
    assert max_abs_diff(hidden, expected) <= FP32_ATOL


def test_config_spellings_and_head_dim(qwen3_dir: Path, causal_lm_dir: Path) -> None:
    config = EngineArgs(model=str(qwen3_dir), device="cpu").create_engine_config().model_config
    assert rope_theta(config.hf_config) == 1000.0  # transformers v5: rope_parameters
    assert config.hf_config["head_dim"] * config.hf_config["num_attention_heads"] != config.hidden_size
    legacy = json.loads((causal_lm_dir / "config.json").read_text())
    assert "rope_parameters" not in legacy and rope_theta(legacy) == 50.0
    with pytest.raises(ValueError, match="RoPE type 'yarn'"):
        rope_theta({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}})


def test_sliding_window_changes_the_output(sliding_dir: Path) -> None:
    """The window is honoured, not ignored: full attention on the same weights differs past the window."""
    token_ids = random_token_ids(sliding_dir, seed=3)
    windowed, _ = run_wde(sliding_dir, token_ids, "naive")
    with config_changed(sliding_dir, use_sliding_window=False):
        full, _ = run_wde(sliding_dir, token_ids, "naive")
    assert max_abs_diff(windowed, full) >= MIN_WINDOW_EFFECT


# ---- the LLM API -------------------------------------------------------------------------------------------
def test_tokenizer_appends_eos(st_dir: Path) -> None:
    """Qwen3-Embedding pools the EOS its tokenizer.json's post-processor appends; transformers v5 keeps that
    post-processor, and wde's tokenizer must give the same ids."""
    from transformers import AutoTokenizer

    from wde.tokenizer import Tokenizer

    reference = AutoTokenizer.from_pretrained(str(st_dir))
    ours = Tokenizer.from_pretrained(st_dir, max_length=256)
    for text in TEXTS:
        expected = reference(text)["input_ids"]
        assert expected[-1] == reference.convert_tokens_to_ids(EOS)
        assert ours.encode_batch([text])[0].token_ids == expected


def test_encode_equals_sentence_transformers(st_llm: wde.LLM, st_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    assert st_llm.model_config.pooling.method == "last" and st_llm.model_config.pooling.normalize
    reference = SentenceTransformer(str(st_dir), device="cpu")
    for prompt_name in ("query", None):
        got = embeddings(st_llm.encode(TEXTS, prompt_name=prompt_name))
        expected = reference.encode(TEXTS, prompt_name=prompt_name)
        cosine = (
            np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
        )
        assert cosine.min() >= ST_MIN_COSINE
        assert max_abs_diff(got, expected) <= ST_ATOL


def test_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = embeddings(st_llm.encode(TEXTS, prompt_name="query"))
    for text, vector in zip(TEXTS, batched, strict=True):
        single = embeddings(st_llm.encode([text], prompt_name="query"))[0]
        assert max_abs_diff(single, vector) <= FP32_ATOL


def test_bare_folder_pools_the_last_token_normalized(causal_lm_dir: Path) -> None:
    """No sentence-transformers metadata: a Qwen3 folder still embeds as Qwen3-Embedding (last token, L2)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(causal_lm_dir))
    model = AutoModel.from_pretrained(str(causal_lm_dir), attn_implementation="eager").eval()
    expected = []
    with torch.inference_mode():
        for text in TEXTS:
            features = tokenizer(text, return_tensors="pt")
            last = model(**features).last_hidden_state[0, -1]
            expected.append(torch.nn.functional.normalize(last, dim=-1).numpy())
    llm = wde.LLM(str(causal_lm_dir), device="cpu", dtype="float32")
    try:
        assert llm.model_config.pooling.method == "last" and llm.model_config.pooling.normalize
        assert max_abs_diff(embeddings(llm.encode(TEXTS)), np.stack(expected)) <= ST_ATOL
    finally:
        llm.engine.shutdown()


# ---- Qwen3-Reranker: Qwen3ForCausalLM with task "score" ----------------------------------------------------
QUERY = "what is a file carver"
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    "",
]
OTHER_INSTRUCTION = "Given a question, retrieve passages about software tools"
RERANKER_MAX_LEN = 96  # long documents are cut inside the document, keeping the assistant prompt


@pytest.fixture(scope="module", params=[False, True], ids=["lm_head", "tied"])
def reranker_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like Qwen3-Reranker: ``Qwen3ForCausalLM`` whose tokenizer appends nothing."""
    return save_tiny_qwen3(
        tmp_path_factory.mktemp("tiny-qwen3-reranker"),
        seed=SEED + 3 + request.param,
        architecture="Qwen3ForCausalLM",
        append_eos=False,
        tie_word_embeddings=request.param,
    )


@torch.inference_mode()
def model_card_scores(
    path: Path, query: str, docs: list[str], instruction: str | None = None, max_length: int = 8192
) -> np.ndarray:
    """The Qwen3-Reranker model card's computation: prefix + tokenizer(formatted, truncated) + suffix, left
    padding, softmax over the last position's ("no", "yes") logits."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    no_id, yes_id = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    prefix = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
        'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    )
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False)
    instruction = instruction or "Given a web search query, retrieve relevant passages that answer the query"
    pairs = [f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" for doc in docs]
    inputs = tokenizer(
        pairs,
        padding=False,
        truncation="longest_first",
        return_attention_mask=False,
        max_length=max_length - len(prefix_ids) - len(suffix_ids),
    )
    inputs["input_ids"] = [prefix_ids + ids + suffix_ids for ids in inputs["input_ids"]]
    inputs = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=max_length)
    logits = model(**inputs).logits[:, -1, [no_id, yes_id]]
    return torch.nn.functional.log_softmax(logits, dim=1)[:, 1].exp().numpy()


def scores(outputs: list[wde.ScoreOutput]) -> np.ndarray:
    return np.array([float(output.scores[0]) for output in outputs])


def test_reranker_equals_model_card(reranker_dir: Path) -> None:
    llm = wde.LLM(str(reranker_dir), device="cpu", dtype="float32", task="score")
    try:
        config = llm.model_config
        assert config.score_activation == "sigmoid" and config.num_labels == 1
        expected = model_card_scores(reranker_dir, QUERY, DOCS)
        assert max_abs_diff(scores(llm.score(QUERY, DOCS)), expected) <= ST_ATOL
        # raw scores are logit("yes") - logit("no")
        raw = scores(llm.score(QUERY, DOCS, raw_scores=True))
        assert max_abs_diff(1 / (1 + np.exp(-raw)), expected) <= ST_ATOL
    finally:
        llm.engine.shutdown()


def test_reranker_instruction_override(reranker_dir: Path) -> None:
    default = model_card_scores(reranker_dir, QUERY, DOCS)
    expected = model_card_scores(reranker_dir, QUERY, DOCS, instruction=OTHER_INSTRUCTION)
    assert max_abs_diff(default, expected) > 10 * ST_ATOL, "the instruction must matter"
    llm = wde.LLM(
        str(reranker_dir), device="cpu", dtype="float32", task="score", score_instruction=OTHER_INSTRUCTION
    )
    try:
        assert max_abs_diff(scores(llm.score(QUERY, DOCS)), expected) <= ST_ATOL
    finally:
        llm.engine.shutdown()


def test_reranker_request_instruction(reranker_dir: Path) -> None:
    """PoolingParams.instruction overrides the server's for one request; other models refuse it."""
    from wde.engine.request_processor import RequestProcessor
    from wde.inputs import PoolingParams
    from wde.request import Request
    from wde.tokenizer import Tokenizer

    config = (
        EngineArgs(model=str(reranker_dir), device="cpu", task="score").create_engine_config().model_config
    )
    PoolingParams(instruction=OTHER_INSTRUCTION).verify(config)
    tokenizer = Tokenizer.from_pretrained(reranker_dir, config.max_model_len)
    processor = RequestProcessor(config, tokenizer)
    requests = [
        Request(str(i), text_pair=(QUERY, DOCS[0]), params=PoolingParams(instruction=instruction))
        for i, instruction in enumerate([None, OTHER_INSTRUCTION])
    ]
    processor.process(requests)
    texts = [tokenizer.backend.decode(request.token_ids, skip_special_tokens=False) for request in requests]
    assert "retrieve relevant passages" in texts[0] and OTHER_INSTRUCTION in texts[1]
    embed_config = EngineArgs(model=str(reranker_dir), device="cpu").create_engine_config().model_config
    with pytest.raises(ValueError, match="does not take an instruction"):
        PoolingParams(instruction=OTHER_INSTRUCTION).verify(embed_config)


def test_reranker_truncates_the_document_not_the_prompt(reranker_dir: Path) -> None:
    long_docs = [" ".join(["the package provides libraries and command line tools"] * 20), DOCS[0]]
    llm = wde.LLM(
        str(reranker_dir), device="cpu", dtype="float32", task="score", max_model_len=RERANKER_MAX_LEN
    )
    try:
        expected = model_card_scores(reranker_dir, QUERY, long_docs, max_length=RERANKER_MAX_LEN)
        assert max_abs_diff(scores(llm.score(QUERY, long_docs)), expected) <= ST_ATOL
    finally:
        llm.engine.shutdown()


def test_reranker_instruction_per_call_and_over_http(reranker_dir: Path) -> None:
    """``LLM.rerank(..., instruction=)`` and the rerank routes' ``instruction`` field equal the model card
    with that instruction; the server's default stays the model card's."""
    import httpx

    from server.settings import ServerSettings
    from tests.server.conftest import live_uvicorn
    from wde.entrypoints.async_llm_engine import AsyncLLMEngine

    expected = model_card_scores(reranker_dir, QUERY, DOCS, instruction=OTHER_INSTRUCTION)
    llm = wde.LLM(str(reranker_dir), device="cpu", dtype="float32", task="score")
    try:
        ranked = llm.rerank(QUERY, DOCS, instruction=OTHER_INSTRUCTION)
        assert max_abs_diff([r.score for r in sorted(ranked, key=lambda r: r.index)], expected) <= ST_ATOL
    finally:
        llm.engine.shutdown()
    engine = AsyncLLMEngine(EngineArgs(model=str(reranker_dir), device="cpu", dtype="float32", task="score"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        with live_uvicorn(engine, ServerSettings()) as server:
            body = {"query": QUERY, "documents": DOCS, "instruction": OTHER_INSTRUCTION}
            results = httpx.post(f"{server.url}/v1/rerank", json=body, timeout=60).json()["results"]
            tei = httpx.post(
                f"{server.url}/rerank",
                json={"query": QUERY, "texts": DOCS, "instruction": OTHER_INSTRUCTION},
                timeout=60,
            ).json()
    finally:
        engine.shutdown(timeout=60)
    got = {r["index"]: r["relevance_score"] for r in results}
    assert max_abs_diff([got[i] for i in range(len(DOCS))], expected) <= ST_ATOL
    assert (
        max_abs_diff([{r["index"]: r["score"] for r in tei}[i] for i in range(len(DOCS))], expected)
        <= ST_ATOL
    )
