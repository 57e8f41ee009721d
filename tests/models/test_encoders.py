"""BERT and XLM-RoBERTa on flat batches vs ``transformers`` (eager attention, padded batch, same weights).

Every attention backend that runs here must give HF's last hidden state on real tokens, the same pooled
vectors, and ``naive``'s output; the ``LLM`` API must give the same vectors batched and alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer as HfFastTokenizer

import wde
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.layers.attention.backend import AttentionBackend
from wde.layers.attention.selector import BACKENDS
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import set_forward_context
from wde.layers.pooler.methods import POOLING_METHODS
from wde.model_folder.registry import MODEL_REGISTRY
from wde.request import Request
from wde.worker.input_batch import InputBatch
from wde.worker.model_loader import load_model

FP32_ATOL = 1e-5  # float32: ours vs HF, every backend vs naive, batch vs single
# bfloat16 (8-bit mantissa): |h| reaches ~4, where one ulp is 2**-6 ~ 0.016; allow a few ulps of rounding
# that differs between the two attention ops (a masking bug moves outputs by ~1).
BF16_ATOL = 1e-1
BIN_ATOL = 0.0  # pytorch_model.bin and model.safetensors hold the same tensors: bit-identical outputs
MIN_TYPE_EFFECT = 1e-2  # segment ids must move the output by far more than the tolerance

DEVICE = torch.device("cpu")
MODEL_NAMES = ("bert", "bert_gelu_new", "xlmr")
BACKEND_NAMES = tuple(BACKENDS)
CHECKED_POOLING = ("cls", "mean", "max", "last")
# Mixed lengths: 1-3 tokens, an equal-length pair, and one at max_model_len (None).
SEQ_LENS: tuple[int | None, ...] = (5, 1, 9, 2, 9, None, 3, 17)
FIRST_ID = 5  # random token ids start past the special tokens (XLM-R's <pad> is 1)


# ---- helpers -----------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One tiny model, a mixed-length batch of token ids, and HF's hidden states for it."""

    name: str
    path: Path
    token_ids: list[list[int]]
    hf_padded: torch.Tensor  # [num_seqs, max_len, hidden_size]
    hf_mask: torch.Tensor  # [num_seqs, max_len] bool, True on real tokens

    runs: dict[tuple[str, torch.dtype], tuple[torch.Tensor, InputBatch]] = field(default_factory=dict)

    @property
    def hf_flat(self) -> torch.Tensor:
        return self.hf_padded[self.hf_mask]  # [num_tokens, hidden_size]

    def run(self, backend_name: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, InputBatch]:
        """Our output for this batch on one backend, computed once per (backend, dtype)."""
        key = (backend_name, dtype)
        if key not in self.runs:
            self.runs[key] = run_wde(self.path, self.token_ids, backend_name, dtype)
        return self.runs[key]


def engine_config(path: Path) -> EngineConfig:
    return EngineArgs(model=str(path), device="cpu").create_engine_config()


def backend_chooser(name: str, dtype: torch.dtype):
    """A load_model chooser that insists on backend ``name`` (skipping the test where it cannot run)."""

    def choose(specs: list[AttentionSpec]) -> type[AttentionBackend]:
        available, reason = BACKENDS[name].is_available(DEVICE.type, dtype)
        for spec in specs if available else []:
            available, reason = BACKENDS[name].supports(spec)
        if not available:
            pytest.skip(f"attention backend {name} is not available: {reason}")
        return BACKENDS[name]

    return choose


def load_fast_tokenizer(path: Path) -> HfFastTokenizer:
    """The directory's tokenizer.json without the fixed padding / truncation it may carry."""
    tokenizer = HfFastTokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def random_token_ids(path: Path, lengths: list[int], seed: int) -> list[list[int]]:
    """``[CLS] random... [SEP]`` (``<s> ... </s>`` for XLM-R); a 1-token sequence is ``[CLS]`` alone."""
    cls_id, sep_id = load_fast_tokenizer(path).encode("").ids
    vocab_size = engine_config(path).model_config.vocab_size
    generator = torch.Generator().manual_seed(seed)
    sequences = []
    for length in lengths:
        middle = torch.randint(FIRST_ID, vocab_size, (max(length - 2, 0),), generator=generator).tolist()
        sequences.append([cls_id, *middle, sep_id][:length] if length > 1 else [cls_id])
    return sequences


@torch.inference_mode()
def run_hf(
    path: Path, token_ids: list[list[int]], token_type_ids: list[list[int]] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF eager attention on the right-padded batch: (last hidden state, mask of real tokens)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32).eval()
    max_len = max(map(len, token_ids))
    input_ids = torch.full((len(token_ids), max_len), model.config.pad_token_id, dtype=torch.long)
    types = torch.zeros_like(input_ids)
    mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = True
        if token_type_ids is not None:
            types[row, : len(ids)] = torch.tensor(token_type_ids[row])
    hidden = model(input_ids=input_ids, attention_mask=mask.long(), token_type_ids=types).last_hidden_state
    return hidden, mask


@torch.inference_mode()
def run_wde(
    path: Path, token_ids: list[list[int]], backend_name: str, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, InputBatch]:
    """Our model on the flat batch: ([num_tokens, hidden_size] float32, the batch it ran on)."""
    model_config = engine_config(path).model_config
    model = load_model(model_config, backend_chooser(backend_name, dtype), DEVICE, dtype)
    requests = [Request(str(i), token_ids=ids) for i, ids in enumerate(token_ids)]
    batch = InputBatch.build(requests, BACKENDS[backend_name], DEVICE)
    with set_forward_context(batch.attn_metadata):
        hidden = model(batch.input_ids, batch.positions, batch.token_type_ids)  # [num_tokens, hidden_size]
    return hidden.float(), batch


def hf_pooled(hidden: torch.Tensor, mask: torch.Tensor, method: str) -> torch.Tensor:
    """Pooling computed on the padded HF output: [num_seqs, max_len, hidden] -> [num_seqs, hidden]."""
    lens = mask.sum(dim=1)
    if method == "cls":
        return hidden[:, 0]
    if method == "last":
        return hidden[torch.arange(hidden.shape[0]), lens - 1]
    if method == "mean":
        return (hidden * mask[..., None]).sum(dim=1) / lens[:, None]
    if method == "max":
        return hidden.masked_fill(~mask[..., None], float("-inf")).amax(dim=1)
    raise ValueError(method)


def max_abs_diff(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    return float(
        (torch.as_tensor(a, dtype=torch.float32) - torch.as_tensor(b, dtype=torch.float32)).abs().max()
    )


def make_llm(path: Path) -> wde.LLM:
    return wde.LLM(model=str(path), device="cpu", dtype="float32", pooling="mean", normalize=False)


def embeddings(outputs: list[wde.EmbeddingOutput]) -> np.ndarray:
    return np.stack([output.embedding for output in outputs])


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=MODEL_NAMES)
def case(request: pytest.FixtureRequest) -> Case:
    path: Path = request.getfixturevalue(f"{request.param}_dir")
    max_model_len = engine_config(path).model_config.max_model_len
    lengths = [max_model_len if n is None else n for n in SEQ_LENS]
    token_ids = random_token_ids(path, lengths, seed=len(request.param))
    hidden, mask = run_hf(path, token_ids)
    return Case(request.param, path, token_ids, hidden, mask)


@pytest.fixture(scope="module", params=("bert", "xlmr"))
def llm_case(request: pytest.FixtureRequest) -> Iterator[tuple[wde.LLM, Path]]:
    """An LLM per model, built once: mean pooling without normalization, so vectors compare to HF directly."""
    path: Path = request.getfixturevalue(f"{request.param}_dir")
    llm = make_llm(path)
    yield llm, path
    llm.engine.shutdown()


@pytest.fixture(scope="module")
def bert_llm(bert_dir: Path) -> Iterator[wde.LLM]:
    llm = make_llm(bert_dir)
    yield llm
    llm.engine.shutdown()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Short and empty texts, an equal pair, and one long enough to be truncated to max_model_len."""
    long_text = " ".join(f"word{i} and some more text" for i in range(60))
    return ["hello", "", "a b", "the same length", "the same length", long_text, "Embeddings are vectors."]


# ---- the model against transformers, per attention backend -------------------------------------------------
def test_batch_covers_the_edge_lengths(case: Case) -> None:
    lens = sorted(map(len, case.token_ids))
    max_model_len = engine_config(case.path).model_config.max_model_len
    assert lens[:3] == [1, 2, 3]
    assert len(lens) != len(set(lens)), "an equal-length pair"
    assert lens[-1] == max_model_len


@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
def test_last_hidden_state_matches_hf(case: Case, backend_name: str) -> None:
    hidden, _ = case.run(backend_name)
    assert hidden.shape == case.hf_flat.shape
    assert max_abs_diff(hidden, case.hf_flat) <= FP32_ATOL


@pytest.mark.parametrize("method", CHECKED_POOLING)
@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
def test_pooled_matches_hf(case: Case, backend_name: str, method: str) -> None:
    hidden, batch = case.run(backend_name)
    pooled = POOLING_METHODS[method](hidden, batch.pooling_metadata)
    expected = hf_pooled(case.hf_padded, case.hf_mask, method)
    assert pooled.shape == expected.shape
    assert max_abs_diff(pooled, expected) <= FP32_ATOL


@pytest.mark.parametrize("backend_name", BACKEND_NAMES)
def test_backend_matches_naive(case: Case, backend_name: str) -> None:
    hidden, _ = case.run(backend_name)
    assert max_abs_diff(hidden, case.run("naive")[0]) <= FP32_ATOL


def test_sdpa_bf16_matches_naive_bf16(case: Case) -> None:
    sdpa, _ = case.run("torch_sdpa", torch.bfloat16)
    naive, _ = case.run("naive", torch.bfloat16)
    assert max_abs_diff(sdpa, naive) <= BF16_ATOL


# ---- the LLM API -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [None, 3])
def test_batch_equals_single(
    llm_case: tuple[wde.LLM, Path], texts: list[str], batch_size: int | None
) -> None:
    llm, _ = llm_case
    batched = embeddings(llm.encode(texts, batch_size=batch_size))
    single = np.stack([llm.encode(text)[0].embedding for text in texts])
    assert batched.dtype == np.float32
    assert max_abs_diff(batched, single) <= FP32_ATOL


def test_llm_encode_matches_hf(llm_case: tuple[wde.LLM, Path], texts: list[str]) -> None:
    """Tokenizer, truncation, batching and mean pooling end to end, against HF's tokenizer and model."""
    from transformers import AutoTokenizer

    llm, path = llm_case
    max_model_len = llm.model_config.max_model_len
    hf_tokenizer = AutoTokenizer.from_pretrained(str(path))
    token_ids = hf_tokenizer(texts, truncation=True, max_length=max_model_len)["input_ids"]
    hidden, mask = run_hf(path, token_ids)
    outputs = llm.encode(texts)
    assert [output.num_tokens for output in outputs] == [len(ids) for ids in token_ids]
    assert max(len(ids) for ids in token_ids) == max_model_len, "the long text is truncated"
    assert max_abs_diff(embeddings(outputs), hf_pooled(hidden, mask, "mean")) <= FP32_ATOL


def test_llm_normalize_matches_hf(llm_case: tuple[wde.LLM, Path], texts: list[str]) -> None:
    llm, _ = llm_case
    raw = embeddings(llm.encode(texts))
    normalized = embeddings(llm.encode(texts, normalize=True))
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, atol=FP32_ATOL)
    assert max_abs_diff(normalized, raw / np.linalg.norm(raw, axis=1, keepdims=True)) <= FP32_ATOL


# ---- checkpoints, segment ids, architectures -------------------------------------------------------------
def test_pytorch_bin_matches_safetensors(bert_dir: Path, bert_bin_dir: Path) -> None:
    assert not list(bert_bin_dir.glob("*.safetensors")) and (bert_bin_dir / "pytorch_model.bin").is_file()
    token_ids = random_token_ids(bert_dir, [1, 7, 30], seed=3)
    from_safetensors, _ = run_wde(bert_dir, token_ids, "naive")
    from_bin, _ = run_wde(bert_bin_dir, token_ids, "naive")
    assert max_abs_diff(from_bin, from_safetensors) <= BIN_ATOL


def test_token_type_ids_are_honored(bert_llm: wde.LLM, bert_dir: Path) -> None:
    encoding = load_fast_tokenizer(bert_dir).encode(
        "what is the capital of france?", "paris is the capital of france."
    )
    ids, types = encoding.ids, encoding.type_ids
    assert 0 < sum(types) < len(types), "type 1 on the second segment only"
    typed = {"prompt_token_ids": ids, "token_type_ids": types}
    untyped = {"prompt_token_ids": ids}
    outputs = embeddings(bert_llm.encode([typed, untyped]))  # one batch: typed and untyped side by side
    hidden, mask = run_hf(bert_dir, [ids, ids], [types, [0] * len(ids)])
    expected = hf_pooled(hidden, mask, "mean")
    assert max_abs_diff(outputs, expected) <= FP32_ATOL
    assert max_abs_diff(outputs[0], outputs[1]) >= MIN_TYPE_EFFECT


def test_xlmr_tokenizer_templates(xlmr_dir: Path) -> None:
    """``<s> A </s>`` and ``<s> A </s></s> B </s>``, all segment ids 0 (XLM-R has one token type)."""
    tokenizer = load_fast_tokenizer(xlmr_dir)
    first, second = tokenizer.encode("hello world"), tokenizer.encode("good morning")
    pair = tokenizer.encode("hello world", "good morning")
    assert first.tokens[0] == "<s>" and first.tokens[-1] == "</s>"
    assert pair.tokens == [*first.tokens, "</s>", *second.tokens[1:]]
    assert not any(pair.type_ids)


def test_unsupported_architecture_is_named(bert_dir: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "gpt2"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        (bert_dir / "config.json").read_text().replace('"BertModel"', '"GPT2Model"')
    )
    with pytest.raises(ValueError, match="GPT2Model") as error:
        EngineArgs(model=str(model_dir)).create_engine_config()
    for supported in MODEL_REGISTRY:
        assert supported in str(error.value)


COMPILE_ATOL = 1e-5  # inductor may reorder float32 reductions; nothing more


@pytest.mark.slow  # torch.compile: tens of seconds
def test_compiled_blocks_equal_eager(bert_dir: Path) -> None:
    texts = ["hello world", "a longer sentence about packages and their descriptions", "x"]
    eager = wde.LLM(model=str(bert_dir), pooling="mean", normalize=False)
    compiled = wde.LLM(model=str(bert_dir), pooling="mean", normalize=False, compile_model=True)
    expected = np.stack([out.embedding for out in eager.encode(texts)])
    got = np.stack([out.embedding for out in compiled.encode(texts)])
    assert np.abs(got - expected).max() <= COMPILE_ATOL
    first_layer = compiled.engine.runner.model.encoder.layer[0]
    assert "forward" in vars(first_layer)  # the compiled layer shadows the eager method
