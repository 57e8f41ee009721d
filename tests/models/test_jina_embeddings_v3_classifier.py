"""Jina v3's cross-encoder (``JinaEmbeddingsV3ForSequenceClassification``) against transformers and
CrossEncoder on a tiny random checkpoint (one label) in three layouts:

- "native": as transformers saves it (the published names; CrossEncoder reads that folder);
- "unconverted": the same weights under transformers' module names (``save_original_format=False``);
- "published": for the remote code (``XLMRobertaForSequenceClassification``, ``rotary_emb_base``,
  ``lora_adaptations``): the encoder's linears and embeddings as ``parametrizations.weight.original`` with
  random LoRA, the head (``classifier.dense`` / ``out_proj``) plain; without a task ("published/base") and
  with ``default_task`` ("published/<task>").

transformers' class has no adapters: wde serves the encoder's as the embedder does. A score request names no
prompt, so it runs with ``default_task``'s adapter, else the base weights; the reference is transformers (and
CrossEncoder over it) with that task's LoRA merged (``test_jina_embeddings_v3.save_published``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import wde
from tests.models.family_checks import CPU_BACKEND_NAMES, ST_ATOL, backend_refusal
from tests.models.test_encoders import BACKENDS, DEVICE, backend_chooser, engine_config, max_abs_diff
from tests.models.test_gte import (
    DOCS,
    FP32_ATOL,
    MAX_POSITIONS,
    QUERIES,
    SIZES,
    VARLEN_ATOL,
    assert_int8_close_to_float32,
    llm_of,
    random_token_ids,
    randomize_blocks_,
    save_unconverted,
    wde_scores,
)
from tests.models.test_jina_embeddings_v3 import (
    MIXED_TASKS,
    PUBLISHED_KEYS,
    REMOTE_CODE,
    SEED,
    TASKS,
    reference_of,
    save_published,
)
from tests.tiny_models import build_xlmr_tokenizer, reference_logits, training_texts
from wde.config import TaskAdapters
from wde.inputs import PoolingParams
from wde.layers.forward_context import set_forward_context
from wde.layers.pooler.methods import PoolingMetadata
from wde.model_folder.registry import MODEL_REGISTRY, resolve_architecture
from wde.models.jina_embeddings_v3 import JinaEmbeddingsV3ForSequenceClassification
from wde.models.xlm_roberta import XLMRobertaForSequenceClassification
from wde.request import Request
from wde.worker.input_batch import InputBatch
from wde.worker.model_loader import load_model, model_class

# the remote code's classifier class (jinaai/xlm-roberta-flash-implementation), as a Jina v3 config names it
CLASSIFIER_CLASS = f"{REMOTE_CODE}--modeling_xlm_roberta.XLMRobertaForSequenceClassification"
CLASSIFIER_KEYS: dict[str, Any] = PUBLISHED_KEYS | {
    "architectures": ["XLMRobertaForSequenceClassification"],
    "auto_map": PUBLISHED_KEYS["auto_map"] | {"AutoModelForSequenceClassification": CLASSIFIER_CLASS},
}
LAYOUTS = ["native", "unconverted", "published/base", "published/retrieval.query"]
PAIRS = [(query, doc) for query in QUERIES for doc in DOCS]  # a long document truncated at MAX_POSITIONS


# ---- tiny checkpoints --------------------------------------------------------------------------------------
def save_native(path: Path) -> Path:
    """transformers' ``JinaEmbeddingsV3ForSequenceClassification`` (one label) with random weights and an
    XLM-R tokenizer (pairs as ``<s> A </s></s> B </s>``)."""
    from transformers import JinaEmbeddingsV3Config
    from transformers import JinaEmbeddingsV3ForSequenceClassification as HfClassifier

    tokenizer = build_xlmr_tokenizer(training_texts())
    config = JinaEmbeddingsV3Config(
        vocab_size=len(tokenizer), pad_token_id=1, type_vocab_size=1, num_labels=1, **SIZES
    )
    torch.manual_seed(SEED)
    model = HfClassifier(config)
    randomize_blocks_(model, SEED)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("jina_v3_classifier")
    native = save_native(root / "native")
    found = {"native": native, "unconverted": save_unconverted(native, root / "unconverted")}
    for task in [None, *TASKS]:
        name = task or "base"
        found[f"published/{name}"] = save_published(native, root / f"published-{name}", task, CLASSIFIER_KEYS)
    return found


def reference(path: Path) -> Path:
    """The folder transformers / CrossEncoder read for ``path``: native, or the merged copy."""
    return path if path.name in ("native", "unconverted") else reference_of(path)


# ---- registry and routing ----------------------------------------------------------------------------------
def test_registered_and_routed(dirs: dict[str, Path]) -> None:
    entry = MODEL_REGISTRY["JinaEmbeddingsV3ForSequenceClassification"]
    assert model_class(entry) is JinaEmbeddingsV3ForSequenceClassification and entry.tasks == ("score",)
    assert JinaEmbeddingsV3ForSequenceClassification.has_classifier
    assert JinaEmbeddingsV3ForSequenceClassification.supports_compile_blocks
    published = json.loads((dirs["published/base"] / "config.json").read_text())
    for name in ("XLMRobertaForSequenceClassification", "RobertaForSequenceClassification"):
        routed = model_class(resolve_architecture([name], "p", published)[1])
        assert routed is JinaEmbeddingsV3ForSequenceClassification
        plain = {"architectures": [name], "position_embedding_type": "absolute"}
        assert model_class(resolve_architecture([name], "p", plain)[1]) is XLMRobertaForSequenceClassification


def test_the_adapters_are_read_from_the_model_directory(dirs: dict[str, Path]) -> None:
    assert engine_config(dirs["native"]).model_config.task_adapters is None
    assert engine_config(dirs["published/base"]).model_config.task_adapters == TaskAdapters(tuple(TASKS))
    default = engine_config(dirs[f"published/{TASKS[0]}"]).model_config.task_adapters
    assert default == TaskAdapters(tuple(TASKS), TASKS[0])


def test_lora_on_the_head_is_refused_in_one_line(dirs: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copytree(dirs["published/base"], tmp_path / "head-lora")
    weights = load_file(path / "model.safetensors")
    dense = weights.pop("classifier.dense.weight")
    rank = 4
    weights |= {
        "classifier.dense.parametrizations.weight.original": dense,
        "classifier.dense.parametrizations.weight.0.lora_A": torch.zeros(len(TASKS), rank, dense.shape[1]),
        "classifier.dense.parametrizations.weight.0.lora_B": torch.zeros(len(TASKS), dense.shape[0], rank),
    }
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"LoRA tensor on its classification head .* merge") as error:
        wde.LLM(str(path), device="cpu")
    assert "\n" not in str(error.value)


# ---- logits against transformers, every layout and CPU backend ---------------------------------------------
@torch.inference_mode()
def wde_logits(
    path: Path, token_ids: list[list[int]], backend_name: str, tasks: list[str | None] | None = None
) -> torch.Tensor:
    """Our model on one flat batch (each sequence with its task's adapter, when ``tasks``), as the runner
    builds it: the logits ``[num_seqs, num_labels]``."""
    model_config = engine_config(path).model_config
    model = load_model(model_config, backend_chooser(backend_name, torch.float32), DEVICE, torch.float32)
    names = tasks or [None] * len(token_ids)
    requests = [
        Request(str(i), token_ids=ids, params=PoolingParams(prompt_name=task))
        for i, (ids, task) in enumerate(zip(token_ids, names, strict=True))
    ]
    adapters = model_config.task_adapters
    batch = InputBatch.build(requests, BACKENDS[backend_name], DEVICE, task_adapters=adapters)
    with set_forward_context(batch.attn_metadata, batch.adapters):
        hidden = model(batch.input_ids, batch.positions, batch.token_type_ids)  # [num_tokens, hidden_size]
    meta = PoolingMetadata.from_seq_lens([len(ids) for ids in token_ids], DEVICE)
    return model.compute_logits(hidden, meta).float()


@torch.inference_mode()
def hf_logits(path: Path, token_ids: list[list[int]]) -> torch.Tensor:
    """transformers' logits (eager, float32) on the right-padded batch: ``[num_seqs, num_labels]``."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(path), attn_implementation="eager").eval()
    max_len = max(map(len, token_ids))
    input_ids = torch.full((len(token_ids), max_len), 1, dtype=torch.long)  # XLM-R's <pad>
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    return model(input_ids=input_ids, attention_mask=mask).logits


@pytest.fixture(scope="module")
def token_ids(dirs: dict[str, Path]) -> list[list[int]]:
    return random_token_ids(dirs["native"], SEED)


@pytest.fixture(scope="module")
def task_logits(dirs: dict[str, Path], token_ids: list[list[int]]) -> dict[str | None, torch.Tensor]:
    """transformers' logits per task (None: the base weights), that task's LoRA merged."""
    found: dict[str | None, torch.Tensor] = {None: hf_logits(dirs["native"], token_ids)}
    for task in TASKS:
        found[task] = hf_logits(reference(dirs[f"published/{task}"]), token_ids)
    return found


@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_logits_match_transformers(
    dirs: dict[str, Path], token_ids: list[list[int]], layout: str, backend_name: str
) -> None:
    path = dirs[layout]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)  # varlen_cpu on a CPU without its kernel
    got = wde_logits(path, token_ids, backend_name)
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    assert max_abs_diff(got, hf_logits(reference(path), token_ids)) <= atol
    assert max_abs_diff(got, wde_logits(path, token_ids, "naive")) <= atol


@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
def test_each_sequence_runs_with_its_task_adapter(
    dirs: dict[str, Path],
    token_ids: list[list[int]],
    task_logits: dict[str | None, torch.Tensor],
    backend_name: str,
) -> None:
    """A batch mixing every task and none (sequences picking adapters as the embedder's requests do) equals
    transformers with each sequence's task merged; the tasks move the logits far past the tolerance."""
    path = dirs["published/base"]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)
    got = wde_logits(path, token_ids, backend_name, MIXED_TASKS)
    expected = torch.stack([task_logits[task][i] for i, task in enumerate(MIXED_TASKS)])
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    assert max_abs_diff(got, expected) <= atol
    assert max_abs_diff(task_logits[TASKS[0]], task_logits[None]) > 1e-2  # a guard on the test itself


# ---- through LLM.score and /rerank: CrossEncoder -----------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scores_equal_cross_encoder(dirs: dict[str, Path], layout: str) -> None:
    """``LLM.score`` (sigmoid of the one logit) == CrossEncoder on the reference folder; the raw logits ==
    transformers'; the batch == each pair alone."""
    from sentence_transformers import CrossEncoder

    path = dirs[layout]
    logits, batched, singles = wde_scores(path, PAIRS)
    expected = CrossEncoder(str(reference(path)), device="cpu", max_length=MAX_POSITIONS).predict(PAIRS)
    assert max_abs_diff(batched, expected) <= ST_ATOL
    assert max_abs_diff(batched, singles) <= FP32_ATOL
    assert max_abs_diff(logits, reference_logits(reference(path), PAIRS, MAX_POSITIONS)) <= FP32_ATOL


@pytest.mark.anyio
async def test_rerank_over_http(dirs: dict[str, Path]) -> None:
    """TEI's /rerank on the published checkpoint (default_task's adapter): LLM.score's scores, by index."""
    from tests.server.conftest import served_model

    path = dirs[f"published/{TASKS[0]}"]
    with llm_of(path) as llm:
        expected = np.array([output.score for output in llm.score(QUERIES[0], DOCS)])
    async with served_model(path) as client:
        response = await client.post("/rerank", json={"query": QUERIES[0], "texts": DOCS})
    assert response.status_code == 200, response.text
    got = {item["index"]: item["score"] for item in response.json()}
    assert max_abs_diff(np.array([got[i] for i in range(len(DOCS))]), expected) <= FP32_ATOL


# ---- int8 --------------------------------------------------------------------------------------------------
@pytest.mark.slow  # int8 compiles its matmuls
def test_int8_close_to_float32(dirs: dict[str, Path]) -> None:
    """Scores within test_int8's MAX_SCORE_DIFF_TINY, with default_task's adapter beside the int8 linears."""
    assert_int8_close_to_float32(dirs[f"published/{TASKS[0]}"], SIZES["num_hidden_layers"])
