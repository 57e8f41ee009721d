"""MPNet (``MPNetModel`` embeddings, ``MPNetForSequenceClassification`` cross-encoders) against transformers,
sentence-transformers and CrossEncoder, on tiny random checkpoints saved as those libraries save them.

The position table is long enough (160 usable positions) that some query-key distances pass the relative
bias's max_distance (128): every kind of bucket (exact, logarithmic, clamped, both directions) is used.
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
from wde.layers.attention.selector import BACKENDS
from wde.layers.attention.spec import AttentionSpec
from wde.models.mpnet import MPNetModel, relative_position_bucket

SEED = 120
HIDDEN_SIZE = 32
MAX_POSITIONS = 162  # 160 usable: MPNet numbers positions from padding_idx (1) + 1
CE_MAX_LEN = 64  # the cross-encoder's tokenizer model_max_length
BIAS_STD = 2.0  # the relative bias table drawn wide, so a bucket or bias bug moves outputs far
FP32_ATOL = 1e-5  # float32: ours vs transformers, batch vs single
ST_ATOL = 1e-4
ST_MAX_SEQ_LENGTH = 48
CPU_BACKENDS = ("naive", "torch_sdpa")
# mixed lengths: 1 token, short ones, an equal pair, past max_distance (128) and the full table
SEQ_LENS = (5, 1, 9, 2, 9, 160, 3, 140, 17)
FIRST_ID = 5  # random token ids start past <s> <pad> </s> <unk> [PAD]

TEXTS = [
    "Clam AntiVirus is an anti-virus toolkit for Unix",
    "scalpel",
    "a",
    "scalpel is a fast file carver that reads a database of header and footer definitions " * 6,
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
def mpnet_vocab() -> list[str]:
    """MPNet's vocabulary layout: <s> <pad> </s> <unk>, BERT's uncased WordPiece vocabulary, <mask>."""
    bert_vocab = (Path(default_model_path()) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return ["<s>", "<pad>", "</s>", "<unk>", *bert_vocab, "<mask>"]


def save_tiny_mpnet(path: Path, seed: int, architecture: str, model_max_length: int, **overrides) -> Path:
    import transformers
    from transformers import MPNetConfig, MPNetTokenizer

    vocab = mpnet_vocab()
    tokenizer = MPNetTokenizer(
        vocab={token: i for i, token in enumerate(vocab)}, model_max_length=model_max_length
    )
    sizes = {
        "hidden_size": HIDDEN_SIZE,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
    }
    config = MPNetConfig(
        vocab_size=len(vocab), max_position_embeddings=MAX_POSITIONS, **{**sizes, **overrides}
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    _randomize_(model, seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("relative_attention_bias.weight"):
                param.mul_(BIAS_STD / param.std())
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_mpnet(tmp_path_factory.mktemp("tiny-mpnet"), SEED, "MPNetModel", MAX_POSITIONS - 2)


@pytest.fixture(scope="module")
def mpnet_st_dir(mpnet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(mpnet_dir), max_seq_length=ST_MAX_SEQ_LENGTH)
    modules = [transformer, Pooling(HIDDEN_SIZE, "mean"), Normalize()]
    path = tmp_path_factory.mktemp("tiny-mpnet-st") / "model"
    SentenceTransformer(modules=modules).save(str(path))
    return path


@pytest.fixture(scope="module")
def mpnet_ce_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_mpnet(
        tmp_path_factory.mktemp("tiny-mpnet-ce"),
        SEED + 1,
        "MPNetForSequenceClassification",
        CE_MAX_LEN,
        num_labels=1,
    )


@pytest.fixture(scope="module")
def token_ids() -> list[list[int]]:
    """``<s> random... </s>``; the 1-token sequence is ``<s>`` alone."""
    generator = torch.Generator().manual_seed(SEED)
    vocab_size = len(mpnet_vocab())
    sequences = []
    for length in SEQ_LENS:
        middle = torch.randint(FIRST_ID, vocab_size, (max(length - 2, 0),), generator=generator).tolist()
        sequences.append([0, *middle, 2] if length > 1 else [0])
    return sequences


def run_hf(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return hf_last_hidden(path, token_ids, 1)


@pytest.fixture(scope="module")
def hf_hidden(mpnet_dir: Path, token_ids: list[list[int]]) -> torch.Tensor:
    return run_hf(mpnet_dir, token_ids)


@pytest.fixture(scope="module")
def st_llm(mpnet_st_dir: Path) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(mpnet_st_dir), device="cpu", dtype="float32")
    yield llm
    llm.engine.shutdown()


# ---- the relative position bias --------------------------------------------------------------------------
def test_buckets_equal_transformers() -> None:
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    distance = torch.arange(-300, 301)[None, :]
    expected = MPNetEncoder.relative_position_bucket(distance)
    assert torch.equal(relative_position_bucket(distance), expected)
    # every bucket is reached but 16, which would be "distance 0, key after the query"
    assert set(expected.unique().tolist()) == set(range(32)) - {16}


def test_backends_without_a_bias_input_refuse_mpnet() -> None:
    spec = AttentionSpec(num_heads=12, head_size=64, position_bias=True)
    for name in ("flash_attn", "xformers"):
        supported, reason = BACKENDS[name].supports(spec)
        assert not supported and "torch_sdpa" in reason
    for name in (*CPU_BACKENDS, "varlen_cpu"):  # varlen_cpu: the bias added in its kernel
        assert BACKENDS[name].supports(spec) == (True, "")
    assert "position bias" in spec.describe()


# ---- MPNetModel against transformers ---------------------------------------------------------------------
def test_engine_config_from_local_folder(mpnet_dir: Path) -> None:
    model_config = EngineArgs(model=str(mpnet_dir)).create_engine_config().model_config
    assert model_config.architecture == "MPNetModel" and model_config.task == "embed"
    assert model_config.max_model_len == MAX_POSITIONS - 2


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_last_hidden_state_matches_hf(
    mpnet_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor, backend_name: str
) -> None:
    hidden, _ = run_wde(mpnet_dir, token_ids, backend_name)
    assert hidden.shape == hf_hidden.shape
    assert max_abs_diff(hidden, hf_hidden) <= FP32_ATOL


def test_masked_lm_checkpoint_serves_its_encoder(
    tmp_path: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor
) -> None:
    """all-mpnet-base-v2's config.json names ``MPNetForMaskedLM``: wde serves the encoder under it (the
    ``mpnet.`` prefix stripped, ``lm_head.*`` skipped), as transformers' ``AutoModel`` does."""
    masked_lm = save_tiny_mpnet(tmp_path / "masked-lm", SEED, "MPNetForMaskedLM", MAX_POSITIONS - 2)
    model_config = EngineArgs(model=str(masked_lm)).create_engine_config().model_config
    assert model_config.architecture == "MPNetForMaskedLM" and model_config.task == "embed"
    hidden, _ = run_wde(masked_lm, token_ids, "naive")
    assert max_abs_diff(hidden, run_hf(masked_lm, token_ids)) <= FP32_ATOL
    assert max_abs_diff(hidden, hf_hidden) <= FP32_ATOL, "the same seed draws the same encoder weights"


def test_varlen_kernel_adds_the_bias_as_transformers(tmp_path: Path, token_ids: list[list[int]]) -> None:
    """The CPU's own kernel (first choice on CPU) with MPNet's bias in its scores: heads of 16, which every
    variant's vectors divide."""
    from wde.layers.attention.backends import varlen_kernel

    if reason := varlen_kernel.unavailable_reason():
        pytest.skip(f"no varlen kernel: {reason}")
    path = save_tiny_mpnet(
        tmp_path / "heads-of-16", SEED, "MPNetModel", MAX_POSITIONS - 2, num_attention_heads=2
    )
    hidden, _ = run_wde(path, token_ids, "varlen_cpu")
    assert max_abs_diff(hidden, run_hf(path, token_ids)) <= FP32_ATOL


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_batch_equals_single(mpnet_dir: Path, token_ids: list[list[int]], backend_name: str) -> None:
    batched, _ = run_wde(mpnet_dir, token_ids, backend_name)
    singles = torch.cat([run_wde(mpnet_dir, [ids], backend_name)[0] for ids in token_ids])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


def test_position_bias_matters(mpnet_dir: Path, token_ids: list[list[int]], hf_hidden: torch.Tensor) -> None:
    """Guard against a test that passes with the bias ignored: zeroing the table moves outputs by far more
    than the tolerance."""
    import wde.models.mpnet as mpnet

    original = mpnet.MPNetEncoder.position_bias
    try:
        mpnet.MPNetEncoder.position_bias = lambda self, n, device: original(self, n, device) * 0  # type: ignore[method-assign]
        hidden, _ = run_wde(mpnet_dir, token_ids, "naive")
    finally:
        mpnet.MPNetEncoder.position_bias = original  # type: ignore[method-assign]
    assert max_abs_diff(hidden, hf_hidden) > 1e-2


# ---- sentence-transformers -------------------------------------------------------------------------------
def test_encode_equals_sentence_transformers(mpnet_st_dir: Path, st_llm: wde.LLM) -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(mpnet_st_dir), device="cpu").encode(TEXTS)
    outputs = st_llm.encode(TEXTS)
    assert st_llm.model_config.max_model_len == ST_MAX_SEQ_LENGTH
    assert max(output.num_tokens for output in outputs) == ST_MAX_SEQ_LENGTH, "the long text is truncated"
    got = np.stack([output.embedding for output in outputs])
    assert_close_to_sentence_transformers(got, expected)


def test_llm_batch_equals_single(st_llm: wde.LLM) -> None:
    batched = np.stack([output.embedding for output in st_llm.encode(TEXTS)])
    singles = np.stack([st_llm.encode(text)[0].embedding for text in TEXTS])
    assert max_abs_diff(batched, singles) <= FP32_ATOL


# ---- MPNetForSequenceClassification ----------------------------------------------------------------------
def test_cross_encoder_matches_transformers_and_cross_encoder(mpnet_ce_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    pairs = [(QUERY, doc) for doc in DOCS]
    llm = wde.LLM(str(mpnet_ce_dir), device="cpu", dtype="float32")
    assert llm.model_config.architecture == "MPNetForSequenceClassification"
    assert llm.model_config.task == "score" and llm.model_config.max_model_len == CE_MAX_LEN
    outputs = llm.score(QUERY, DOCS, raw_scores=True)
    assert outputs[-1].num_tokens == CE_MAX_LEN, "the long pair is truncated"
    logits = np.stack([output.scores for output in outputs])
    assert max_abs_diff(logits, reference_logits(mpnet_ce_dir, pairs, CE_MAX_LEN)) <= FP32_ATOL

    expected = CrossEncoder(str(mpnet_ce_dir), device="cpu", max_length=CE_MAX_LEN).predict(pairs)
    scores = np.array([output.score for output in llm.score(QUERY, DOCS)])
    assert max_abs_diff(scores, expected) <= ST_ATOL
    singles = np.array([llm.score(QUERY, doc)[0].score for doc in DOCS])
    assert max_abs_diff(scores, singles) <= FP32_ATOL
    llm.engine.shutdown()


def test_registry_serves_both_architectures() -> None:
    from wde.model_folder.registry import MODEL_REGISTRY
    from wde.worker.model_loader import model_class

    assert model_class(MODEL_REGISTRY["MPNetModel"]) is MPNetModel
    assert MODEL_REGISTRY["MPNetForSequenceClassification"].tasks == ("score",)
