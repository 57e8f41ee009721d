"""GTE (``GteModel`` / ``GteForSequenceClassification``, and the published ``NewModel`` /
``NewForTokenClassification`` / ``NewForSequenceClassification``) against transformers, sentence-transformers
and CrossEncoder, on tiny random checkpoints in three layouts:

- "native": as sentence-transformers saves transformers' ``GteModel`` (CLS pooling, normalized, as GTE's
  sentence-transformers configs), ``rope_parameters``;
- "unconverted": the same weights under transformers' module names (``save_original_format=False``);
- "published": config.json and weight names rewritten as the Hub repos have them (``NewModel``,
  ``model_type "new"``, ``auto_map`` to the remote code, ``rope_theta`` + NTK ``rope_scaling``, ``new.``
  prefixes, gte-multilingual-base's token-weight head).

transformers cannot compute NTK-scaled RoPE (it has no "ntk" type), so the published layouts are compared
with transformers' model on the native weights whose RoPE frequencies are replaced by the remote code's
(``remote_code_inv_freq``, transcribed from Alibaba-NLP/new-impl's ``NTKScalingRotaryEmbedding``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import wde
from tests.models.family_checks import (
    CPU_BACKEND_NAMES,
    assert_close_to_sentence_transformers,
    backend_refusal,
)
from tests.models.family_checks import hf_last_hidden as padded_last_hidden
from tests.models.test_encoders import backend_chooser, engine_config, max_abs_diff, run_wde
from tests.tiny_models import (
    BERT_TOKENIZER_FILES,
    WEIGHT_STD,
    _randomize_,
    build_xlmr_tokenizer,
    reference_logits,
    training_texts,
)
from wde.engine_args import default_model_path
from wde.layers.attention.selector import BACKENDS
from wde.layers.forward_context import set_forward_context
from wde.model_folder.registry import MODEL_REGISTRY
from wde.models.gte import GteForSequenceClassification, GteModel, GteRope, check_config, read_rope
from wde.request import Request
from wde.worker.input_batch import InputBatch
from wde.worker.model_loader import load_model, model_class

SEED = 380
CPU = torch.device("cpu")
MAX_POSITIONS = 128  # the longest training texts are truncated
FP32_ATOL = 1e-5  # float32: ours vs transformers, every backend vs naive, batch vs single
# varlen_cpu sums each row in 8- or 16-wide vector parts (its exp2 ~1e-7 relative)
VARLEN_ATOL = 2e-5
ST_ATOL = 1e-4
NUM_TEXTS = 100  # of training_texts(): a few are longer than MAX_POSITIONS (truncated)
MIN_NTK_EFFECT = 1e-2  # NTK scaling must move outputs far past the tolerance
SEQ_LENS = (5, 1, 9, 2, 9, MAX_POSITIONS, 3, 40)  # mixed lengths, an equal pair, one at the longest
SIZES = {
    "hidden_size": 64,
    "num_attention_heads": 4,  # heads of 16: every CPU backend runs them
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "max_position_embeddings": MAX_POSITIONS,
    "initializer_range": WEIGHT_STD,
}
# the checkpoints, as the published ones they stand for: tokenizer, token types, RoPE base, NTK scaling
CHECKPOINTS: dict[str, dict[str, Any]] = {
    "base_en": {  # gte-base-en-v1.5: BERT's tokenizer, no token-type table
        "tokenizer": "bert",
        "type_vocab_size": 0,
        "rope_theta": 500_000.0,
        "rope_scaling": {"factor": 2.0, "type": "ntk"},
        "published_architecture": "NewModel",
    },
    "multilingual": {  # gte-multilingual-base: XLM-R's tokenizer, a token-weight head beside the encoder
        "tokenizer": "xlmr",
        "type_vocab_size": 1,
        "rope_theta": 160_000.0,
        "rope_scaling": {"factor": 8.0, "type": "ntk"},
        "published_architecture": "NewForTokenClassification",
    },
    "reranker": {  # a cross-encoder with BERT's tokenizer: token types 0 / 1 on pairs
        "tokenizer": "bert",
        "type_vocab_size": 2,
        "rope_theta": 160_000.0,
        "rope_scaling": {"factor": 2.0, "type": "ntk"},
        "published_architecture": "NewForSequenceClassification",
    },
}
REMOTE_CODE_MAP = {
    "AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
    "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel",
    "AutoModelForSequenceClassification": "Alibaba-NLP/new-impl--modeling.NewForSequenceClassification",
    "AutoModelForTokenClassification": "Alibaba-NLP/new-impl--modeling.NewForTokenClassification",
}
# what the remote code's NewConfig adds (its defaults, as the Hub configs spell them)
REMOTE_CODE_KEYS = {
    "layer_norm_type": "layer_norm",
    "position_embedding_type": "rope",
    "pack_qkv": True,
    "unpad_inputs": False,
    "use_memory_efficient_attention": False,
    "logn_attention_scale": False,
    "logn_attention_clip1": False,
}
QUERIES = ["what is a file carver", "mail server virus scanning"]
DOCS = [
    "scalpel is a fast file carver that reads a database of header and footer definitions.",
    "Clam AntiVirus is an anti-virus toolkit for Unix, integrated with mail servers.",
    "x",
    " ".join(["the package provides libraries, documentation and command line tools"] * 12),  # truncated
]


# ---- the remote code's RoPE, transcribed -------------------------------------------------------------------
def remote_code_inv_freq(dim: int, base: float, factor: float, mixed_b: float | None) -> torch.Tensor:
    """``NTKScalingRotaryEmbedding._set_cos_sin_cache`` (Alibaba-NLP/new-impl modeling.py) for a factor > 1,
    where its cache is built past max_position_embeddings at load."""
    base = base * (factor if mixed_b is None else 1)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    if mixed_b is None:
        return inv_freq / factor ** (2 / dim)  # (6)
    a = torch.tensor(factor).log() / (dim / 2) ** mixed_b  # (13)
    lambda_1_m = (a * torch.arange(1, dim // 2 + 1).float() ** mixed_b).exp()  # (12)
    return inv_freq / lambda_1_m  # (10)


def use_remote_code_rope_(model: torch.nn.Module, rope_scaling: dict[str, Any] | None) -> None:
    """Give every transformers ``GteRotaryEmbedding`` inside ``model`` the remote code's NTK frequencies."""
    from transformers.models.gte.modeling_gte import GteRotaryEmbedding

    if rope_scaling is None:
        return
    rotaries = [module for module in model.modules() if isinstance(module, GteRotaryEmbedding)]
    assert rotaries, "no GteRotaryEmbedding to patch"
    for rotary in rotaries:
        config = rotary.config
        dim = config.hidden_size // config.num_attention_heads
        base = config.rope_parameters["rope_theta"]
        rotary.inv_freq = remote_code_inv_freq(dim, base, rope_scaling["factor"], rope_scaling.get("mixed_b"))


# ---- tiny checkpoints --------------------------------------------------------------------------------------
def randomize_blocks_(model: torch.nn.Module, seed: int) -> None:
    """``_randomize_``, with the blocks' norms around 1 too (it knows BERT's LayerNorm names only)."""
    _randomize_(model, seed)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("layernorm.weight"):
                param.add_(1.0)


def save_hf(path: Path, name: str, seed: int) -> Path:
    """transformers' ``GteModel`` (or ``GteForSequenceClassification`` for the reranker) with random weights,
    saved with its tokenizer."""
    from transformers import GteConfig, GteForSequenceClassification, GteModel

    spec = CHECKPOINTS[name]
    if spec["tokenizer"] == "bert":
        bundled = Path(default_model_path())
        vocab_size, pad_token_id = json.loads((bundled / "config.json").read_text())["vocab_size"], 0
    else:
        tokenizer = build_xlmr_tokenizer(training_texts())
        vocab_size, pad_token_id = len(tokenizer), 1
    config = GteConfig(
        vocab_size=vocab_size,
        pad_token_id=pad_token_id,
        type_vocab_size=spec["type_vocab_size"],
        rope_parameters={"rope_type": "default", "rope_theta": spec["rope_theta"]},
        num_labels=1,
        **SIZES,
    )
    torch.manual_seed(seed)
    model = (GteForSequenceClassification if name == "reranker" else GteModel)(config)
    randomize_blocks_(model, seed)
    model.save_pretrained(path)
    if spec["tokenizer"] == "bert":
        for file_name in BERT_TOKENIZER_FILES:
            shutil.copy(bundled / file_name, path / file_name)
    else:
        tokenizer.save_pretrained(path)
    return path


def save_native(path: Path, name: str, seed: int) -> Path:
    """The embedders as sentence-transformers saves them (CLS pooling, normalized); the reranker as
    transformers saves it (CrossEncoder reads that folder)."""
    if name == "reranker":
        return save_hf(path, name, seed)
    return save_pooled_st(save_hf(path.with_name(f"{path.name}-hf"), name, seed), path, "cls")


def save_pooled_st(hf_dir: Path, path: Path, pooling: str, prompts: dict[str, str] | None = None) -> Path:
    """``hf_dir`` as sentence-transformers saves an encoder embedder: Transformer -> Pooling(``pooling``)
    -> Normalize, with ``prompts``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(hf_dir))
    pooler = Pooling(transformer.get_embedding_dimension(), pooling)
    SentenceTransformer(modules=[transformer, pooler, Normalize()], prompts=prompts).save(str(path))
    return path


def save_unconverted(native: Path, path: Path) -> Path:
    """The native folder with the weights under transformers' module names (``layers.N.self_attn.q_proj``,
    ``mlp.gate_proj``, ``post_attention_layernorm``, ...)."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    shutil.copytree(native, path)
    config = json.loads((native / "config.json").read_text())
    auto = AutoModelForSequenceClassification if "Classification" in config["architectures"][0] else AutoModel
    auto.from_pretrained(str(native)).save_pretrained(path / "unconverted", save_original_format=False)
    shutil.move(path / "unconverted" / "model.safetensors", path / "model.safetensors")
    shutil.rmtree(path / "unconverted")
    names = load_file(str(path / "model.safetensors"))
    assert any(".self_attn.q_proj." in name for name in names), "transformers saved converted names"
    return path


def save_published(native: Path, path: Path, name: str, rope_scaling: dict[str, Any]) -> Path:
    """The native folder rewritten as the Hub repos are: NewConfig's config.json (remote code), the weights
    under ``new.`` where the remote code's head class holds the encoder, and gte-multilingual-base's
    token-weight head (``classifier``, one label) beside its encoder."""
    spec = CHECKPOINTS[name]
    shutil.copytree(native, path)
    native_config = json.loads((native / "config.json").read_text())
    config = {
        key: value
        for key, value in native_config.items()
        if key not in ("rope_parameters", "model_type", "architectures", "transformers_version")
    }
    config.update(REMOTE_CODE_KEYS)
    config.update(
        architectures=[spec["published_architecture"]],
        model_type="new",
        auto_map=REMOTE_CODE_MAP,
        rope_theta=native_config["rope_parameters"]["rope_theta"],
        rope_scaling=rope_scaling,
        transformers_version="4.39.1",
    )
    (path / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(native / "model.safetensors"))
    prefixed = spec["published_architecture"] != "NewModel"
    published = {}
    for weight_name, tensor in weights.items():
        bare = weight_name.removeprefix("gte.")
        published[f"new.{bare}" if prefixed and not bare.startswith("classifier.") else bare] = tensor
    if spec["published_architecture"] == "NewForTokenClassification":
        generator = torch.Generator().manual_seed(SEED)
        published["classifier.weight"] = torch.randn(1, SIZES["hidden_size"], generator=generator)
        published["classifier.bias"] = torch.randn(1, generator=generator)
    save_file(published, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def native_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-gte")
    return {name: save_native(root / name, name, SEED + i) for i, name in enumerate(CHECKPOINTS)}


@pytest.fixture(scope="module")
def layout_dirs(native_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{name}/{layout}`` -> folder, for every checkpoint in every layout."""
    root = tmp_path_factory.mktemp("tiny-gte-layouts")
    dirs = {}
    for name, native in native_dirs.items():
        scaling = CHECKPOINTS[name]["rope_scaling"]
        dirs[f"{name}/native"] = native
        dirs[f"{name}/unconverted"] = save_unconverted(native, root / f"{name}-unconverted")
        dirs[f"{name}/published"] = save_published(native, root / f"{name}-published", name, scaling)
        mixed = {**scaling, "mixed_b": 0.75}
        dirs[f"{name}/published_mixed"] = save_published(native, root / f"{name}-mixed", name, mixed)
    return dirs


def rope_scaling_of(path: Path) -> dict[str, Any] | None:
    return json.loads((path / "config.json").read_text()).get("rope_scaling")


@contextmanager
def llm_of(path: Path, **kwargs: Any) -> Iterator[wde.LLM]:
    llm = wde.LLM(str(path), device="cpu", dtype="float32", **kwargs)
    try:
        yield llm
    finally:
        llm.engine.shutdown()


# ---- references --------------------------------------------------------------------------------------------
def random_token_ids(path: Path, seed: int) -> list[list[int]]:
    """``[CLS] random... [SEP]`` (``<s> ... </s>``), one sequence per SEQ_LENS; a 1-token one is [CLS]."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    vocab_size = json.loads((path / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(seed)
    sequences = []
    for length in SEQ_LENS:
        middle = torch.randint(5, vocab_size, (max(length - 2, 0),), generator=generator).tolist()
        sequences.append([cls_id, *middle, sep_id] if length > 1 else [cls_id])
    return sequences


def hf_last_hidden(
    native: Path, token_ids: list[list[int]], rope_scaling: dict[str, Any] | None
) -> torch.Tensor:
    """transformers (eager, float32) on the right-padded batch, with the remote code's RoPE where
    ``rope_scaling`` names NTK: the real tokens' last hidden state ``[num_tokens, hidden_size]``."""
    pad_id = json.loads((native / "config.json").read_text()).get("pad_token_id") or 0
    return padded_last_hidden(
        native, token_ids, pad_id, prepare=lambda model: use_remote_code_rope_(model, rope_scaling)
    )


def sentence_transformers_embeddings(native: Path, texts: list[str], rope_scaling: dict[str, Any] | None):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(native), device="cpu")
    use_remote_code_rope_(model, rope_scaling)
    return model.encode(texts, convert_to_numpy=True)


def cross_encoder_scores(native: Path, pairs: list[tuple[str, str]], rope_scaling: dict[str, Any] | None):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(native), device="cpu", max_length=MAX_POSITIONS)
    use_remote_code_rope_(model, rope_scaling)
    return model.predict(pairs, convert_to_numpy=True)


class HiddenStates:
    """transformers' and naive attention's last hidden states, computed once per checkpoint (every backend's
    test compares with them)."""

    def __init__(self) -> None:
        self.computed: dict[tuple[str, ...], torch.Tensor] = {}

    def transformers(
        self, native: Path, token_ids: list[list[int]], rope_scaling: dict[str, Any] | None
    ) -> torch.Tensor:
        key = ("transformers", str(native), json.dumps(rope_scaling))
        if key not in self.computed:
            self.computed[key] = hf_last_hidden(native, token_ids, rope_scaling)
        return self.computed[key]

    def naive(self, path: Path, token_ids: list[list[int]]) -> torch.Tensor:
        key = ("naive", str(path))
        if key not in self.computed:
            self.computed[key] = run_wde(path, token_ids, "naive")[0]
        return self.computed[key]


@pytest.fixture(scope="module")
def hidden_states() -> HiddenStates:
    return HiddenStates()


# ---- RoPE and config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mixed_b", [None, 0.75])
@pytest.mark.parametrize(("dim", "factor"), [(64, 2.0), (64, 8.0), (16, 2.0)])
def test_ntk_frequencies_equal_the_remote_code(dim: int, factor: float, mixed_b: float | None) -> None:
    ours = GteRope(500_000.0, factor, mixed_b).inv_freq(dim, torch.device("cpu"))
    expected = remote_code_inv_freq(dim, 500_000.0, factor, mixed_b)
    assert torch.allclose(ours, expected, rtol=1e-6, atol=0.0)
    plain = GteRope(500_000.0).inv_freq(dim, torch.device("cpu"))
    assert (plain - ours).abs().max() > 1e-3, "the scaling changes the frequencies"


def test_rope_from_either_config_spelling() -> None:
    assert read_rope({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}) == GteRope(5e5)
    published = {"model_type": "new", "rope_theta": 160000, "rope_scaling": {"type": "ntk", "factor": 8.0}}
    assert read_rope(published) == GteRope(160_000.0, 8.0)
    # transformers' GteConfig carries a published rope_scaling into rope_parameters
    converted = {"rope_parameters": {"type": "ntk", "factor": 2.0, "rope_theta": 500000, "rope_type": "ntk"}}
    assert read_rope(converted) == GteRope(500_000.0, 2.0)
    mixed = {"rope_theta": 1e4, "rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}}
    assert read_rope(mixed) == GteRope(1e4, 2.0, 0.5)
    assert read_rope({"model_type": "new"}) == GteRope(10_000.0)  # NewConfig's default base
    assert read_rope({"model_type": "gte"}) == GteRope(160_000.0)  # GteConfig's


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"position_embedding_type": "absolute"}, "position_embedding_type 'absolute'"),
        ({"layer_norm_type": "rms_norm"}, "layer_norm_type 'rms_norm'"),
        ({"logn_attention_scale": True}, "logn_attention_scale"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "RoPE type 'linear'"),
        ({"rope_scaling": {"type": "ntk"}}, "without a factor"),
    ],
)
def test_what_cannot_be_mapped_is_named_in_one_line(setting: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named) as error:
        check_config({"model_type": "new", **setting})
    assert "\n" not in str(error.value)


def test_two_unmappable_settings_in_one_line(layout_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copytree(layout_dirs["base_en/published"], tmp_path / "logn")
    config = json.loads((path / "config.json").read_text())
    config.update(logn_attention_scale=True, layer_norm_type="rms_norm")
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"layer_norm_type 'rms_norm' \(only 'layer_norm'\); logn_attention_scale"
    ):
        wde.LLM(str(path), device="cpu")


def test_registered_with_its_tasks() -> None:
    for architecture in ("GteModel", "NewModel", "NewForTokenClassification"):
        assert model_class(MODEL_REGISTRY[architecture]) is GteModel
        assert MODEL_REGISTRY[architecture].tasks == ("embed",)
    for architecture in ("GteForSequenceClassification", "NewForSequenceClassification"):
        assert model_class(MODEL_REGISTRY[architecture]) is GteForSequenceClassification
        assert MODEL_REGISTRY[architecture].tasks == ("score",)
    assert GteForSequenceClassification.has_classifier and GteModel.supports_compile_blocks


# ---- the encoder against transformers, every layout and CPU backend ----------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize("layout", ["native", "unconverted", "published", "published_mixed"])
@pytest.mark.parametrize("name", ["base_en", "multilingual"])
def test_last_hidden_state_matches_transformers(
    layout_dirs: dict[str, Path], hidden_states: HiddenStates, name: str, layout: str, backend_name: str
) -> None:
    path = layout_dirs[f"{name}/{layout}"]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)  # varlen_cpu on a CPU without its kernel
    token_ids = random_token_ids(path, seed=SEED)
    expected = hidden_states.transformers(layout_dirs[f"{name}/native"], token_ids, rope_scaling_of(path))
    hidden, _ = run_wde(path, token_ids, backend_name)
    assert hidden.shape == expected.shape
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    assert max_abs_diff(hidden, expected) <= atol
    assert max_abs_diff(hidden, hidden_states.naive(path, token_ids)) <= atol


def test_ntk_scaling_matters(layout_dirs: dict[str, Path]) -> None:
    """Guard on the tests themselves: the published (NTK) layout differs from the native (plain RoPE) one by
    far more than the tolerance, so the comparisons above would catch scaling ignored or misapplied."""
    path = layout_dirs["base_en/published"]
    token_ids = random_token_ids(path, seed=SEED)
    scaled, _ = run_wde(path, token_ids, "naive")
    plain, _ = run_wde(layout_dirs["base_en/native"], token_ids, "naive")
    mixed, _ = run_wde(layout_dirs["base_en/published_mixed"], token_ids, "naive")
    assert max_abs_diff(scaled, plain) > MIN_NTK_EFFECT
    assert max_abs_diff(scaled, mixed) > MIN_NTK_EFFECT


@torch.inference_mode()
def run_wde_typed(path: Path, token_ids: list[int], token_type_ids: list[int]) -> torch.Tensor:
    """Our model (naive attention) on one sequence with its segment ids: ``[num_tokens, hidden_size]``."""
    model_config = engine_config(path).model_config
    model = load_model(model_config, backend_chooser("naive", torch.float32), CPU, torch.float32)
    request = Request("0", token_ids=token_ids, token_type_ids=token_type_ids)
    batch = InputBatch.build([request], BACKENDS["naive"], CPU)
    with set_forward_context(batch.attn_metadata):
        return model(batch.input_ids, batch.positions, batch.token_type_ids)  # [num_tokens, hidden_size]


def test_token_types_are_honored(layout_dirs: dict[str, Path]) -> None:
    """The reranker's two-row token-type table: segment 1 moves the output, as transformers computes it."""
    from transformers import AutoModel

    path = layout_dirs["reranker/published"]
    ids = random_token_ids(path, seed=SEED)[-1]
    types = [0] * 10 + [1] * (len(ids) - 10)
    model = AutoModel.from_pretrained(str(layout_dirs["reranker/native"]), attn_implementation="eager").eval()
    use_remote_code_rope_(model, rope_scaling_of(path))
    with torch.inference_mode():
        expected = model(
            input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])
        ).last_hidden_state[0]
        untyped = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    assert max_abs_diff(expected, untyped) > MIN_NTK_EFFECT
    assert max_abs_diff(run_wde_typed(path, ids, types), expected) <= FP32_ATOL


# ---- through LLM: sentence-transformers and CrossEncoder ---------------------------------------------------
@pytest.mark.parametrize("layout", ["native", "published"])
@pytest.mark.parametrize("name", ["base_en", "multilingual"])
def test_encode_equals_sentence_transformers(layout_dirs: dict[str, Path], name: str, layout: str) -> None:
    path = layout_dirs[f"{name}/{layout}"]
    texts = training_texts()[:NUM_TEXTS]
    expected = sentence_transformers_embeddings(layout_dirs[f"{name}/native"], texts, rope_scaling_of(path))
    assert_encodes_as_sentence_transformers(path, texts, expected, "cls")


def assert_encodes_as_sentence_transformers(
    path: Path, texts: list[str], expected: np.ndarray, pooling_method: str
) -> None:
    """``LLM.encode`` pools as the sentence-transformers config says, truncates at MAX_POSITIONS, equals
    ``expected`` and answers a batch as each text alone."""
    with llm_of(path) as llm:
        assert llm.model_config.pooling.method == pooling_method and llm.model_config.pooling.normalize
        assert llm.model_config.max_model_len == MAX_POSITIONS
        outputs = llm.encode(texts)
        assert max(output.num_tokens for output in outputs) == MAX_POSITIONS, "some texts are truncated"
        batched = np.stack([output.embedding for output in outputs])
        singles = np.stack([llm.encode([text])[0].embedding for text in texts[:12]])
    assert_close_to_sentence_transformers(batched, expected)
    assert max_abs_diff(batched[:12], singles) <= FP32_ATOL


@pytest.mark.parametrize("layout", ["native", "published"])
def test_cross_encoder_equals_cross_encoder(layout_dirs: dict[str, Path], layout: str) -> None:
    path = layout_dirs[f"reranker/{layout}"]
    native = layout_dirs["reranker/native"]
    pairs = [(query, doc) for query in QUERIES for doc in DOCS]
    logits, batched, singles = wde_scores(path, pairs)
    expected = cross_encoder_scores(native, pairs, rope_scaling_of(path))
    assert max_abs_diff(batched, expected) <= ST_ATOL
    assert max_abs_diff(batched, singles) <= FP32_ATOL
    if layout == "native":  # transformers computes plain RoPE only
        assert max_abs_diff(logits, reference_logits(native, pairs, MAX_POSITIONS)) <= FP32_ATOL


def wde_scores(path: Path, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Through ``LLM.score`` (task "score"): the raw logits ``[num_pairs, num_labels]``, the scores of the
    batch and of each pair alone ``[num_pairs]``."""
    queries, docs = [query for query, _ in pairs], [doc for _, doc in pairs]
    with llm_of(path) as llm:
        assert llm.model_config.task == "score"
        logits = np.stack([output.scores for output in llm.score(queries, docs, raw_scores=True)])
        batched = np.array([output.score for output in llm.score(queries, docs)])
        singles = np.array([llm.score(query, doc)[0].score for query, doc in pairs])
    return logits, batched, singles


# ---- int8 and HTTP -----------------------------------------------------------------------------------------
@pytest.mark.slow  # int8 compiles its matmuls
@pytest.mark.parametrize("name", ["multilingual", "reranker"])
def test_int8_close_to_float32(layout_dirs: dict[str, Path], name: str) -> None:
    assert_int8_close_to_float32(layout_dirs[f"{name}/published"], SIZES["num_hidden_layers"])


def assert_int8_close_to_float32(path: Path, num_layers: int) -> None:
    """int8 block linears (qkv, output, up_gate, down in each layer) within the tiny models' tolerance:
    scores for a cross-encoder, embeddings' cosine for an embedder."""
    from tests.models.test_int8 import MAX_SCORE_DIFF_TINY, MIN_COSINE_TINY
    from wde.layers.quantization.int8_linear import Int8Linear

    with llm_of(path) as exact, llm_of(path, quantization="int8") as int8:
        linears = [m for m in int8.engine.runner.model.modules() if isinstance(m, Int8Linear)]
        assert len(linears) == 4 * num_layers
        if exact.model_config.task == "score":
            queries, docs = [query for query in QUERIES for _ in DOCS], DOCS * len(QUERIES)
            got = np.array([output.score for output in int8.score(queries, docs)])
            expected = np.array([output.score for output in exact.score(queries, docs)])
            assert max_abs_diff(got, expected) <= MAX_SCORE_DIFF_TINY
        else:
            texts = training_texts()[:16]
            got = np.stack([output.embedding for output in int8.encode(texts)])
            expected = np.stack([output.embedding for output in exact.encode(texts)])
            assert (got * expected).sum(axis=1).min() >= MIN_COSINE_TINY  # both normalized


@pytest.mark.slow  # torch.compile: tens of seconds
def test_compiled_blocks_equal_eager(layout_dirs: dict[str, Path]) -> None:
    assert_compiled_equals_eager(layout_dirs["multilingual/published"])


def assert_compiled_equals_eager(path: Path) -> None:
    """``--compile-model`` compiles each layer's MLP block and answers as eager."""
    texts = training_texts()[:8]
    with llm_of(path) as eager, llm_of(path, compile_model=True) as compiled:
        expected = np.stack([output.embedding for output in eager.encode(texts)])
        got = np.stack([output.embedding for output in compiled.encode(texts)])
        first_layer = compiled.engine.runner.model.encoder.layer[0]
        assert "mlp_block" in vars(first_layer)  # the compiled block shadows the eager method
    assert max_abs_diff(got, expected) <= FP32_ATOL


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "route", "body"),
    [
        ("multilingual", "/embed", {"inputs": QUERIES}),
        ("reranker", "/rerank", {"query": QUERIES[0], "texts": DOCS}),
    ],
)
async def test_published_checkpoints_served_over_http(
    layout_dirs: dict[str, Path], name: str, route: str, body: dict[str, Any]
) -> None:
    from tests.server.conftest import served_model

    async with served_model(layout_dirs[f"{name}/published"]) as client:
        info = (await client.get("/info")).json()
        assert info["model_architecture"] == CHECKPOINTS[name]["published_architecture"]
        response = await client.post(route, json=body)
        assert response.status_code == 200, response.text
        assert len(response.json()) == len(body.get("inputs", body.get("texts")))


@pytest.mark.shared_data  # the acceptance text: real documents, not the generated corpus
@pytest.mark.parametrize("name", ["base_en", "multilingual"])
def test_published_layout_equals_sentence_transformers_on_docs(
    layout_dirs: dict[str, Path], name: str
) -> None:
    from tests.shared_data import read_texts

    path = layout_dirs[f"{name}/published"]
    texts = read_texts("docs.jsonl", limit=NUM_TEXTS)
    expected = sentence_transformers_embeddings(layout_dirs[f"{name}/native"], texts, rope_scaling_of(path))
    assert_encodes_as_sentence_transformers(path, texts, expected, "cls")
