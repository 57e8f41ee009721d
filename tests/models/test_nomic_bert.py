"""NomicBERT (``NomicBertModel`` / ``NomicBertForSequenceClassification``) against transformers,
sentence-transformers, CrossEncoder and a transcription of the published remote code, on tiny random
checkpoints in three layouts:

- "native": as sentence-transformers saves transformers' ``NomicBertModel`` (mean pooling, normalized, the
  prompts of nomic-embed-text-v1.5), transformers' config and the contrastors weight names it saves;
- "unconverted": the same weights under transformers' module names (``save_original_format=False``);
- "published": config.json rewritten as the Hub repos have it (the remote code's GPT-2 names, ``auto_map``
  to nomic-ai/nomic-bert-2048), the classifier's encoder behind ``bert.``.

transformers implements the published embedders' settings only (no biases, post-norm, full rotary, SwiGLU);
the remote code's other switches (biases, ``prenorm``, ``rotary_emb_fraction``, GeGLU) are compared with
``remote_code_last_hidden``, transcribed from contrastors' ``modeling_hf_nomic_bert.py``.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import wde
from tests.models.family_checks import (
    CPU_BACKEND_NAMES,
    assert_close_to_sentence_transformers,
    backend_refusal,
    hf_last_hidden,
)
from tests.models.test_encoders import max_abs_diff, run_wde
from tests.models.test_gte import (
    DOCS,
    QUERIES,
    assert_compiled_equals_eager,
    assert_encodes_as_sentence_transformers,
    assert_int8_close_to_float32,
    llm_of,
    random_token_ids,
    randomize_blocks_,
    run_wde_typed,
    save_pooled_st,
    save_unconverted,
    wde_scores,
)
from tests.tiny_models import BERT_TOKENIZER_FILES, WEIGHT_STD, reference_logits, training_texts
from wde.engine_args import default_model_path
from wde.model_folder.nomic_bert_config import reserved_positions, standard_config
from wde.model_folder.registry import MODEL_REGISTRY
from wde.models.nomic_bert import NomicBertForSequenceClassification, NomicBertModel, check_config
from wde.worker.model_loader import model_class

SEED = 381
MAX_POSITIONS = 128  # the longest training texts are truncated
FP32_ATOL = 1e-5  # float32: ours vs transformers, every backend vs naive, batch vs single
VARLEN_ATOL = 2e-5  # varlen_cpu sums each row in 8- or 16-wide vector parts
ST_ATOL = 1e-4
MIN_EFFECT = 1e-2  # a switch must move outputs far past the tolerance
NUM_TEXTS = 100  # of training_texts(): a few are longer than MAX_POSITIONS (truncated)
VOCAB_SIZE = 30528  # the bundled tokenizer's 30,522 padded to a multiple of 64, as nomic-embed-text's
SIZES = {
    "hidden_size": 64,
    "num_attention_heads": 4,  # heads of 16: every CPU backend runs them
    "intermediate_size": 256,  # a multiple of 256, as the remote code's gated MLP rounds it
    "num_hidden_layers": 2,
    "max_position_embeddings": MAX_POSITIONS,
    "initializer_range": WEIGHT_STD,
}
ROPE_THETA = 1000.0
# nomic-embed-text-v1.5's config_sentence_transformers.json
PROMPTS = {
    "search_query": "search_query: ",
    "search_document": "search_document: ",
    "classification": "classification: ",
    "clustering": "clustering: ",
}
REMOTE_CODE_MAP = {
    "AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
    "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel",
    "AutoModelForMaskedLM": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertForPreTraining",
    "AutoModelForSequenceClassification": (
        "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertForSequenceClassification"
    ),
}
# nomic-embed-text-v1.5's config.json, less the sizes (filled from SIZES)
PUBLISHED_CONFIG: dict[str, Any] = {
    "activation_function": "swiglu",
    "attn_pdrop": 0.0,
    "auto_map": REMOTE_CODE_MAP,
    "bos_token_id": None,
    "causal": False,
    "dense_seq_output": True,
    "embd_pdrop": 0.0,
    "eos_token_id": None,
    "fused_bias_fc": True,
    "fused_dropout_add_ln": True,
    "layer_norm_epsilon": 1e-12,
    "max_trained_positions": 2048,
    "mlp_fc1_bias": False,
    "mlp_fc2_bias": False,
    "model_type": "nomic_bert",
    "pad_vocab_size_multiple": 64,
    "parallel_block": False,
    "parallel_block_tied_norm": False,
    "prenorm": False,
    "qkv_proj_bias": False,
    "resid_pdrop": 0.0,
    "rotary_emb_base": 1000,
    "rotary_emb_fraction": 1.0,
    "rotary_emb_interleaved": False,
    "rotary_emb_scale_base": None,
    "rotary_scaling_factor": None,
    "scale_attn_weights": True,
    "torch_dtype": "float32",
    "transformers_version": "4.37.2",
    "type_vocab_size": 2,
    "use_flash_attn": True,
    "use_rms_norm": False,
    "use_xentropy": True,
    "vocab_size": VOCAB_SIZE,
}


# ---- tiny checkpoints --------------------------------------------------------------------------------------
def save_hf(path: Path, name: str, seed: int) -> Path:
    """transformers' ``NomicBertModel`` (``NomicBertForSequenceClassification`` for the reranker) with random
    weights, saved with the bundled BERT tokenizer."""
    from transformers import NomicBertConfig
    from transformers import NomicBertForSequenceClassification as HfClassifier
    from transformers import NomicBertModel as HfModel

    config = NomicBertConfig(
        vocab_size=VOCAB_SIZE,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        num_labels=1,
        **SIZES,
    )
    torch.manual_seed(seed)
    model = (HfClassifier if name == "reranker" else HfModel)(config)
    randomize_blocks_(model, seed)
    model.save_pretrained(path)
    bundled = Path(default_model_path())
    for file_name in BERT_TOKENIZER_FILES:
        shutil.copy(bundled / file_name, path / file_name)
    return path


def save_native(path: Path, name: str, seed: int) -> Path:
    """The embedder as sentence-transformers saves nomic-embed-text-v1.5 (mean pooling, normalized, its
    prompts); the reranker as transformers saves it (CrossEncoder reads that folder)."""
    if name == "reranker":
        return save_hf(path, name, seed)
    return save_pooled_st(save_hf(path.with_name(f"{path.name}-hf"), name, seed), path, "mean", PROMPTS)


def published_config(native_config: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    config = {
        **PUBLISHED_CONFIG,
        "architectures": native_config["architectures"],
        "n_embd": native_config["hidden_size"],
        "n_head": native_config["num_attention_heads"],
        "n_inner": native_config["intermediate_size"],
        "n_layer": native_config["num_hidden_layers"],
        "n_positions": native_config["max_position_embeddings"],
        "initializer_range": native_config["initializer_range"],
    }
    for key in ("id2label", "label2id"):
        if key in native_config:
            config[key] = native_config[key]
    return {**config, **overrides}


def save_published(native: Path, path: Path, **overrides: Any) -> Path:
    """The native folder rewritten as the Hub repos are: the remote code's config.json, a classifier's
    encoder under ``bert.`` (the remote code's attribute)."""
    shutil.copytree(native, path)
    native_config = json.loads((native / "config.json").read_text())
    config = published_config(native_config, **overrides)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(native / "model.safetensors"))
    renamed = {name.replace("nomic_bert.", "bert.", 1): tensor for name, tensor in weights.items()}
    save_file(renamed, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def layout_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{name}/{layout}`` -> folder, for the embedder and the reranker in every layout."""
    root = tmp_path_factory.mktemp("tiny-nomic-bert")
    dirs = {}
    for i, name in enumerate(("embedder", "reranker")):
        native = save_native(root / name, name, SEED + i)
        dirs[f"{name}/native"] = native
        dirs[f"{name}/unconverted"] = save_unconverted(native, root / f"{name}-unconverted")
        dirs[f"{name}/published"] = save_published(native, root / f"{name}-published")
    return dirs


@pytest.fixture(scope="module")
def token_ids(layout_dirs: dict[str, Path]) -> list[list[int]]:
    """Random ids of the (padded) vocabulary, one sequence per test_gte.SEQ_LENS (one at MAX_POSITIONS)."""
    return random_token_ids(layout_dirs["embedder/native"], SEED)


# ---- the remote code, transcribed --------------------------------------------------------------------------
@torch.inference_mode()
def remote_code_last_hidden(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    """contrastors' ``NomicBertModel.forward`` (modeling_hf_nomic_bert.py) on a published folder, one
    sequence at a time (segment 0): the last hidden state ``[num_tokens, hidden_size]``."""
    config = json.loads((path / "config.json").read_text())
    weights = load_file(str(path / "model.safetensors"))
    return torch.cat([remote_code_sequence(config, weights, ids) for ids in token_ids])


def remote_code_sequence(config: dict[str, Any], w: dict[str, torch.Tensor], ids: list[int]) -> torch.Tensor:
    """One sequence through the remote code's blocks: ``[num_tokens, hidden_size]``."""
    hidden, num_heads, num_tokens = config["n_embd"], config["n_head"], len(ids)
    head_dim = hidden // num_heads
    rotary_dim = int(head_dim * config["rotary_emb_fraction"])
    act = F.silu if config["activation_function"] == "swiglu" else F.gelu  # NomciBertGatedMLP's gate
    inv_freq = 1.0 / (config["rotary_emb_base"] ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
    freqs = torch.outer(torch.arange(num_tokens).float(), inv_freq)  # [num_tokens, rotary_dim / 2]
    cos, sin = freqs.cos().repeat(1, 2)[:, None], freqs.sin().repeat(1, 2)[:, None]  # "... d -> 1 (2 d)"

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        eps = config["layer_norm_epsilon"]
        return F.layer_norm(x, (hidden,), w[f"{name}.weight"], w[f"{name}.bias"], eps)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]
        x1, x2 = rotated.chunk(2, dim=-1)
        return torch.cat([rotated * cos + torch.cat([-x2, x1], dim=-1) * sin, passed], dim=-1)

    def attn(x: torch.Tensor, layer: str) -> torch.Tensor:
        qkv = linear(x, f"{layer}.attn.Wqkv").view(num_tokens, 3, num_heads, head_dim)
        q, k, v = rotate(qkv[:, 0]), rotate(qkv[:, 1]), qkv[:, 2]
        probs = (torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)).softmax(dim=-1)
        out = torch.einsum("hqk,khd->qhd", probs, v).reshape(num_tokens, hidden)
        return linear(out, f"{layer}.attn.out_proj")

    def mlp(x: torch.Tensor, layer: str) -> torch.Tensor:
        up, gate = linear(x, f"{layer}.mlp.fc11"), linear(x, f"{layer}.mlp.fc12")
        return linear(up * act(gate), f"{layer}.mlp.fc2")

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][0]
    x, residual = norm(x, "emb_ln"), None
    for i in range(config["n_layer"]):
        layer = f"encoder.layers.{i}"
        if config["prenorm"]:  # NomicBertBlock's prenorm branch; the encoder returns hidden_states
            residual = x if residual is None else x + residual
            residual = attn(norm(residual, f"{layer}.norm1"), layer) + residual
            x = mlp(norm(residual, f"{layer}.norm2"), layer)
        else:
            x = norm(attn(x, layer) + x, f"{layer}.norm1")
            x = norm(mlp(x, layer) + x, f"{layer}.norm2")
    return x


# the remote code's switches the published embedders leave off: config overrides, and the biases to add
SWITCHES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "biases": (
        {"qkv_proj_bias": True, "mlp_fc1_bias": True, "mlp_fc2_bias": True},
        ("attn.Wqkv", "attn.out_proj", "mlp.fc11", "mlp.fc12", "mlp.fc2"),
    ),
    "prenorm": ({"prenorm": True}, ()),
    "partial_rotary": ({"rotary_emb_fraction": 0.5, "rotary_emb_base": 10_000}, ()),
    "geglu": ({"activation_function": "geglu"}, ()),
}


def save_switched(published: Path, path: Path, switch: str) -> Path:
    overrides, biased = SWITCHES[switch]
    shutil.copytree(published, path)
    config = {**json.loads((published / "config.json").read_text()), **overrides}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(published / "model.safetensors"))
    generator = torch.Generator().manual_seed(SEED)
    for i in range(config["n_layer"]):
        for module in biased:
            rows = weights[f"encoder.layers.{i}.{module}.weight"].shape[0]
            weights[f"encoder.layers.{i}.{module}.bias"] = torch.randn(rows, generator=generator) * WEIGHT_STD
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


# ---- config ------------------------------------------------------------------------------------------------
def test_published_config_maps_onto_transformers_names() -> None:
    published = {**PUBLISHED_CONFIG, "n_embd": 768, "n_head": 12, "n_inner": 3072, "n_layer": 12}
    standard = standard_config({**published, "n_positions": 8192, "vocab_size": 30522})
    assert (standard["hidden_size"], standard["num_attention_heads"], standard["num_hidden_layers"]) == (
        768,
        12,
        12,
    )
    assert standard["intermediate_size"] == 3072 and standard["max_position_embeddings"] == 8192
    assert standard["layer_norm_eps"] == 1e-12 and standard["hidden_act"] == "silu"
    assert standard["vocab_size"] == 30528  # padded to pad_vocab_size_multiple, as the remote code does
    assert standard["rope_parameters"] == {"rope_type": "default", "rope_theta": 1000.0}
    assert standard_config(standard) == standard  # idempotent; transformers' configs pass as they are
    # the remote code's gated MLP rounds its width up to a multiple of 256, and its defaults fill the rest
    sparse = standard_config({"n_embd": 64, "n_head": 4, "n_inner": 100, "activation_function": "swiglu"})
    assert sparse["intermediate_size"] == 256 and sparse["qkv_proj_bias"] and sparse["mlp_fc2_bias"]
    assert sparse["rope_parameters"]["rope_theta"] == 10_000.0 and sparse["layer_norm_eps"] == 1e-5


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved True"),
        ({"rotary_emb_scale_base": 512}, "rotary_emb_scale_base 512"),
        ({"rotary_emb_fraction": 0.0}, "rotary_emb_fraction 0"),
        ({"rotary_emb_fraction": 0.3}, "rotary_emb_fraction 0.3"),
        ({"activation_function": "gelu"}, "activation_function 'gelu'"),
        ({"moe_every_n_layers": 2, "num_experts": 8}, "moe_every_n_layers 2"),
        ({"parallel_block": True}, "parallel_block True"),
    ],
)
def test_what_cannot_be_mapped_is_named_in_one_line(setting: dict[str, Any], named: str) -> None:
    config = standard_config({**PUBLISHED_CONFIG, "n_embd": 64, "n_head": 4, "n_layer": 1, **setting})
    with pytest.raises(ValueError, match=named) as error:
        check_config(config)
    assert "\n" not in str(error.value)


def test_two_unmappable_settings_in_one_line(layout_dirs: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copytree(layout_dirs["embedder/published"], tmp_path / "interleaved")
    config = json.loads((path / "config.json").read_text())
    config.update(rotary_emb_interleaved=True, causal=True)
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"rotary_emb_interleaved True .*; causal True"):
        wde.LLM(str(path), device="cpu")


def test_rotary_scaling_serves_the_unscaled_lengths() -> None:
    """With rotary_scaling_factor the remote code rescales past max_trained_positions: wde stops there."""
    published = {**PUBLISHED_CONFIG, "n_embd": 64, "n_head": 4, "n_positions": 8192}
    assert reserved_positions(published) == 0
    scaled = {**published, "rotary_scaling_factor": 2}
    assert reserved_positions(scaled) == 8192 - 2048


def test_registered_with_its_tasks() -> None:
    for architecture in ("NomicBertModel", "NomicBertForPreTraining", "NomicBertForMaskedLM"):
        assert model_class(MODEL_REGISTRY[architecture]) is NomicBertModel
        assert MODEL_REGISTRY[architecture].tasks == ("embed",)
    classifier = MODEL_REGISTRY["NomicBertForSequenceClassification"]
    assert model_class(classifier) is NomicBertForSequenceClassification and classifier.tasks == ("score",)
    assert NomicBertModel.supports_compile_blocks
    assert NomicBertForSequenceClassification.has_classifier


# ---- the encoder against transformers and the remote code, every layout and CPU backend --------------------
@dataclass(frozen=True)
class Reference:
    token_ids: list[list[int]]  # random sequences of the (padded) vocabulary
    hidden: torch.Tensor  # transformers' last hidden state of the native embedder [num_tokens, hidden_size]


@pytest.fixture(scope="module")
def reference(layout_dirs: dict[str, Path], token_ids: list[list[int]]) -> Reference:
    return Reference(token_ids, hf_last_hidden(layout_dirs["embedder/native"], token_ids, pad_id=0))


@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize("layout", ["native", "unconverted", "published"])
def test_last_hidden_state_matches_transformers(
    layout_dirs: dict[str, Path], reference: Reference, layout: str, backend_name: str
) -> None:
    path = layout_dirs[f"embedder/{layout}"]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)  # varlen_cpu on a CPU without its kernel
    hidden, _ = run_wde(path, reference.token_ids, backend_name)
    assert hidden.shape == reference.hidden.shape
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    assert max_abs_diff(hidden, reference.hidden) <= atol


def test_transcription_equals_transformers(layout_dirs: dict[str, Path], reference: Reference) -> None:
    """Guard on the reference itself: on the published embedder's settings it is transformers' model."""
    remote = remote_code_last_hidden(layout_dirs["embedder/published"], reference.token_ids)
    assert max_abs_diff(remote, reference.hidden) <= FP32_ATOL


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_remote_code_switches_equal_the_remote_code(
    layout_dirs: dict[str, Path], reference: Reference, tmp_path: Path, switch: str
) -> None:
    path = save_switched(layout_dirs["embedder/published"], tmp_path / switch, switch)
    token_ids = reference.token_ids
    expected = remote_code_last_hidden(path, token_ids)
    assert max_abs_diff(expected, reference.hidden) > MIN_EFFECT, "the switch changes the output"
    # pre-norm states are unnormalized (|x| up to ~10): the float32 tolerance relative to their size
    atol = FP32_ATOL * max(1.0, float(expected.abs().max()))
    for backend_name in ("naive", "torch_sdpa"):
        hidden, _ = run_wde(path, token_ids, backend_name)
        assert max_abs_diff(hidden, expected) <= atol


def test_token_types_are_honored(layout_dirs: dict[str, Path], token_ids: list[list[int]]) -> None:
    """Segment 1 of the two-row token-type table moves the output, as transformers computes it."""
    from transformers import AutoModel

    ids = token_ids[-1]
    types = [0] * 10 + [1] * (len(ids) - 10)
    model = AutoModel.from_pretrained(str(layout_dirs["embedder/native"]), attn_implementation="eager").eval()
    with torch.inference_mode():
        typed = model(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]))
        expected = typed.last_hidden_state[0]
        untyped = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    assert max_abs_diff(expected, untyped) > MIN_EFFECT
    assert max_abs_diff(run_wde_typed(layout_dirs["embedder/published"], ids, types), expected) <= FP32_ATOL


def test_masked_lm_checkpoint_serves_embeddings(
    layout_dirs: dict[str, Path], token_ids: list[list[int]], tmp_path: Path
) -> None:
    """transformers' ``NomicBertForMaskedLM`` (and the remote code's ``NomicBertForPreTraining``, the same
    layout under ``bert.``): the encoder's states, the MLM head skipped."""
    from transformers import AutoModel, NomicBertForMaskedLM

    native = layout_dirs["embedder/native"]
    masked_lm = NomicBertForMaskedLM.from_pretrained(str(native))
    masked_lm.save_pretrained(tmp_path / "mlm")
    for file_name in BERT_TOKENIZER_FILES:
        shutil.copy(Path(default_model_path()) / file_name, tmp_path / "mlm" / file_name)
    names = load_file(str(tmp_path / "mlm" / "model.safetensors"))
    assert any(name.startswith("cls.") for name in names) and "nomic_bert.emb_ln.weight" in names
    first_ids = token_ids[:3]
    base = AutoModel.from_pretrained(str(native), attn_implementation="eager").eval()
    with torch.inference_mode():
        expected = torch.cat([base(input_ids=torch.tensor([ids])).last_hidden_state[0] for ids in first_ids])
    hidden, _ = run_wde(tmp_path / "mlm", first_ids, "naive")
    assert max_abs_diff(hidden, expected) <= FP32_ATOL


# ---- through LLM: sentence-transformers (pooling, prompts) and CrossEncoder --------------------------------
@pytest.mark.parametrize("layout", ["native", "published"])
def test_encode_equals_sentence_transformers(layout_dirs: dict[str, Path], layout: str) -> None:
    from sentence_transformers import SentenceTransformer

    path = layout_dirs[f"embedder/{layout}"]
    texts = training_texts()[:NUM_TEXTS]
    expected = SentenceTransformer(str(layout_dirs["embedder/native"]), device="cpu").encode(texts)
    assert_encodes_as_sentence_transformers(path, texts, expected, "mean")


def test_prompts_as_sentence_transformers_picks_them(layout_dirs: dict[str, Path]) -> None:
    """``prompt_name`` applies nomic-embed-text's task prefixes; ``input_type`` "query" / "document" names
    no prompt of theirs, so it adds none, as ``encode_query`` / ``encode_document`` add none."""
    from sentence_transformers import SentenceTransformer

    path = layout_dirs["embedder/published"]
    texts = training_texts()[:16]
    reference = SentenceTransformer(str(layout_dirs["embedder/native"]), device="cpu")
    # sentence-transformers adds empty "query" / "document" prompts beside the saved ones
    assert {name: prompt for name, prompt in reference.prompts.items() if prompt} == PROMPTS
    with llm_of(path) as llm:
        assert {name: prompt for name, prompt in llm.model_config.prompts.items() if prompt} == PROMPTS
        for prompt_name in ("search_query", "search_document", "classification"):
            got = np.stack([output.embedding for output in llm.encode(texts, prompt_name=prompt_name)])
            assert_close_to_sentence_transformers(got, reference.encode(texts, prompt_name=prompt_name))
        plain = np.stack([output.embedding for output in llm.encode(texts)])
        query = np.stack([output.embedding for output in llm.encode(texts, input_type="query")])
        document = np.stack([output.embedding for output in llm.encode(texts, input_type="document")])
    assert_close_to_sentence_transformers(query, reference.encode_query(texts))
    assert_close_to_sentence_transformers(document, reference.encode_document(texts))
    assert max_abs_diff(plain, query) == 0.0
    prompted = reference.encode(texts, prompt_name="search_query")
    assert max_abs_diff(prompted, plain) > MIN_EFFECT, "the prompt changes the embedding"


@pytest.mark.parametrize("layout", ["native", "unconverted", "published"])
def test_cross_encoder_equals_cross_encoder(layout_dirs: dict[str, Path], layout: str) -> None:
    from sentence_transformers import CrossEncoder

    path = layout_dirs[f"reranker/{layout}"]
    native = layout_dirs["reranker/native"]
    pairs = [(query, doc) for query in QUERIES for doc in DOCS]
    logits, batched, singles = wde_scores(path, pairs)
    expected = CrossEncoder(str(native), device="cpu", max_length=MAX_POSITIONS).predict(pairs)
    assert max_abs_diff(batched, expected) <= ST_ATOL
    assert max_abs_diff(batched, singles) <= FP32_ATOL
    assert max_abs_diff(logits, reference_logits(native, pairs, MAX_POSITIONS)) <= FP32_ATOL


@pytest.mark.slow  # int8 compiles its matmuls
@pytest.mark.parametrize("name", ["embedder", "reranker"])
def test_int8_close_to_float32(layout_dirs: dict[str, Path], name: str) -> None:
    assert_int8_close_to_float32(layout_dirs[f"{name}/published"], SIZES["num_hidden_layers"])


@pytest.mark.slow  # torch.compile: tens of seconds
def test_compiled_blocks_equal_eager(layout_dirs: dict[str, Path]) -> None:
    assert_compiled_equals_eager(layout_dirs["embedder/published"])


@pytest.mark.shared_data  # the acceptance text: real documents, not the generated corpus
def test_published_layout_equals_sentence_transformers_on_docs(layout_dirs: dict[str, Path]) -> None:
    from sentence_transformers import SentenceTransformer

    from tests.shared_data import read_texts

    texts = read_texts("docs.jsonl", limit=NUM_TEXTS)
    expected = SentenceTransformer(str(layout_dirs["embedder/native"]), device="cpu").encode(texts)
    assert_encodes_as_sentence_transformers(layout_dirs["embedder/published"], texts, expected, "mean")
