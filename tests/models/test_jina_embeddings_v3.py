"""Jina v3 (``JinaEmbeddingsV3Model``) against transformers and sentence-transformers on tiny random
checkpoints in two layouts:

- "native": as sentence-transformers saves transformers' ``JinaEmbeddingsV3Model`` (mean pooling,
  normalized), transformers' config and the published weight names it saves (no adapters);
- "published": config.json and weights as the Hub repo has them (``XLMRobertaModel`` with ``auto_map`` to
  jinaai/xlm-roberta-flash-implementation, ``rotary_emb_base``, ``lora_adaptations``; ``roberta.`` names,
  every linear and embedding as ``parametrizations.weight.original`` + random ``lora_A`` / ``lora_B``).

transformers has no adapters: the reference for a task is transformers' model (and sentence-transformers over
it) on the native weights with that task's LoRA merged as the remote code's ``LoRAParametrization`` applies
it (``W + alpha / rank * B @ A``, an embedding's ``A @ B``), computed here on the checkpoint's tensors. wde
keeps the adapters unmerged and runs each request with the one its prompt_name names (the folders carry
Jina v3's sentence-transformers prompts, named after the tasks), else config.json's default_task, else none:
one model answers every task, in mixed batches.
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
from tests.models.family_checks import (
    CPU_BACKEND_NAMES,
    assert_close_to_sentence_transformers,
    backend_refusal,
    hf_last_hidden,
)
from tests.models.test_encoders import BACKENDS, DEVICE, backend_chooser, engine_config, max_abs_diff, run_wde
from tests.models.test_gte import (
    FP32_ATOL,
    MAX_POSITIONS,
    SIZES,
    VARLEN_ATOL,
    llm_of,
    random_token_ids,
    randomize_blocks_,
    save_pooled_st,
)
from tests.tiny_models import build_xlmr_tokenizer, training_texts
from wde.config import TaskAdapters
from wde.inputs import PoolingParams
from wde.layers.forward_context import set_forward_context
from wde.model_folder.registry import MODEL_REGISTRY, resolve_architecture
from wde.models.jina_embeddings_v3 import JinaEmbeddingsV3Model
from wde.models.xlm_roberta import XLMRobertaModel
from wde.request import Request
from wde.worker.input_batch import InputBatch
from wde.worker.model_loader import load_model, model_class

SEED = 383
TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
LORA_RANK, LORA_ALPHA = 4, 2.0
LAYOUTS = ["native", "published/base", *(f"published/{task}" for task in TASKS)]
# jinaai/jina-embeddings-v3's config_sentence_transformers.json: one prompt per task, two of them empty
TASK_PROMPTS = {
    "retrieval.query": "Represent the query for retrieving evidence documents: ",
    "retrieval.passage": "Represent the document for retrieval: ",
    "separation": "",
    "classification": "",
    "text-matching": "",
}
# one batch's sequences (SEQ_LENS of test_gte): every task, and none
MIXED_TASKS: list[str | None] = [None, *TASKS, None, TASKS[1]]
NUM_TEXTS = 24  # of training_texts(): batch and single
REMOTE_CODE = "jinaai/xlm-roberta-flash-implementation"
PUBLISHED_KEYS: dict[str, Any] = {
    "architectures": ["XLMRobertaModel"],
    "model_type": "xlm-roberta",
    "auto_map": {
        "AutoConfig": f"{REMOTE_CODE}--configuration_xlm_roberta.XLMRobertaFlashConfig",
        "AutoModel": f"{REMOTE_CODE}--modeling_lora.XLMRobertaLoRA",
    },
    "position_embedding_type": "rotary",
    "rotary_emb_base": 20_000.0,
    "load_trained_adapters": True,
    "lora_adaptations": TASKS,
    "lora_rank": LORA_RANK,
    "lora_alpha": LORA_ALPHA,
    "lora_dropout_p": 0.0,
    "task_instructions": {task: "" for task in TASKS},
    "use_flash_attn": True,
}


# ---- tiny checkpoints --------------------------------------------------------------------------------------
def save_native(path: Path) -> Path:
    """transformers' ``JinaEmbeddingsV3Model`` with random weights as sentence-transformers saves it."""
    from transformers import JinaEmbeddingsV3Config
    from transformers import JinaEmbeddingsV3Model as HfJinaModel

    tokenizer = build_xlmr_tokenizer(training_texts())
    config = JinaEmbeddingsV3Config(vocab_size=len(tokenizer), pad_token_id=1, type_vocab_size=1, **SIZES)
    torch.manual_seed(SEED)
    model = HfJinaModel(config)
    randomize_blocks_(model, SEED)
    hf_dir = path.with_name(f"{path.name}-hf")
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    return save_pooled_st(hf_dir, path, "mean", TASK_PROMPTS)


def is_adapted(name: str) -> bool:
    """The tensors the remote code adapts: every linear's and embedding's weight."""
    return name.endswith(".weight") and ("embeddings." in name or ".mixer." in name or ".mlp." in name)


def lora_pair(name: str, shape: torch.Size, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random A, B in the remote code's shapes: a linear's [tasks, rank, fan_in] / [tasks, fan_out, rank], an
    embedding's [tasks, rows, rank] / [tasks, rank, dim]."""
    rows, cols = shape
    if "embeddings." in name:
        a_shape, b_shape = (len(TASKS), rows, LORA_RANK), (len(TASKS), LORA_RANK, cols)
    else:
        a_shape, b_shape = (len(TASKS), LORA_RANK, cols), (len(TASKS), rows, LORA_RANK)
    return 0.1 * torch.randn(a_shape, generator=generator), 0.1 * torch.randn(b_shape, generator=generator)


def save_published(
    native: Path, path: Path, task: str | None, published_keys: dict[str, Any] = PUBLISHED_KEYS
) -> Path:
    """The native folder as the Hub repo has it (with ``default_task`` when ``task``), and the native folder
    with that task's LoRA merged (the reference) at ``path``-merged. A classifier's encoder is under
    ``roberta.`` already, its head (``classifier.``) has no LoRA."""
    shutil.copytree(native, path)
    weights = load_file(native / "model.safetensors")
    generator = torch.Generator().manual_seed(SEED)
    published, merged = {}, {}
    for name, tensor in sorted(weights.items()):
        merged[name] = tensor
        bare = name.removeprefix("roberta.")
        if not is_adapted(name):
            published[name if name.startswith("classifier.") else f"roberta.{bare}"] = tensor
            continue
        module = f"roberta.{bare.removesuffix('.weight')}.parametrizations.weight"
        lora_a, lora_b = lora_pair(name, tensor.shape, generator)
        published |= {
            f"{module}.original": tensor,
            f"{module}.0.lora_A": lora_a,
            f"{module}.0.lora_B": lora_b,
        }
        if task is not None:
            t = TASKS.index(task)
            delta = lora_a[t] @ lora_b[t] if "embeddings." in name else lora_b[t] @ lora_a[t]
            merged[name] = tensor + LORA_ALPHA / LORA_RANK * delta
    save_file(published, str(path / "model.safetensors"))
    config = json.loads((native / "config.json").read_text())
    config = {key: value for key, value in config.items() if key != "rope_parameters"} | published_keys
    if task is not None:
        config["default_task"] = task
    (path / "config.json").write_text(json.dumps(config, indent=2))
    reference = path.with_name(f"{path.name}-merged")
    shutil.copytree(native, reference)
    save_file(merged, str(reference / "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("jina_v3")
    native = save_native(root / "native")
    found = {"native": native, "published/base": save_published(native, root / "published-base", None)}
    for task in TASKS:
        found[f"published/{task}"] = save_published(native, root / f"published-{task}", task)
    return found


@pytest.fixture(scope="module")
def no_lora_dir(dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers' checkpoint (no LoRA weights) whose config.json still lists lora_adaptations, as a
    conversion of the published config keeps them."""
    path = shutil.copytree(dirs["native"], tmp_path_factory.mktemp("jina_v3_no_lora") / "model")
    config = json.loads((path / "config.json").read_text()) | {"lora_adaptations": TASKS}
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def task_references(dirs: dict[str, Path]) -> dict[str | None, torch.Tensor]:
    """transformers' last hidden state of the random sequences per task (None: the base weights), each task's
    LoRA merged."""
    token_ids = random_token_ids(dirs["native"], SEED)
    found = {None: hf_last_hidden(dirs["native"], token_ids, pad_id=1)}
    for task in TASKS:
        found[task] = hf_last_hidden(reference_of(dirs[f"published/{task}"]), token_ids, pad_id=1)
    return found


def reference_of(path: Path) -> Path:
    """The folder transformers / sentence-transformers read for ``path``: native, or the merged copy."""
    return path if path.name == "native" else path.with_name(f"{path.name}-merged")


# ---- config and routing ------------------------------------------------------------------------------------
def test_registered_and_routed(dirs: dict[str, Path]) -> None:
    assert model_class(MODEL_REGISTRY["JinaEmbeddingsV3Model"]) is JinaEmbeddingsV3Model
    assert model_class(MODEL_REGISTRY["XLMRobertaLoRA"]) is JinaEmbeddingsV3Model
    published = json.loads((dirs["published/base"] / "config.json").read_text())
    assert model_class(resolve_architecture(["XLMRobertaModel"], "p", published)[1]) is JinaEmbeddingsV3Model
    plain = {"architectures": ["XLMRobertaModel"], "position_embedding_type": "absolute"}
    assert model_class(resolve_architecture(["XLMRobertaModel"], "p", plain)[1]) is XLMRobertaModel


def test_unknown_task_is_one_line(dirs: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copytree(dirs["published/base"], tmp_path / "bad")
    config = json.loads((path / "config.json").read_text()) | {"default_task": "retrieval"}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"default_task 'retrieval'.*lora_adaptations") as error:
        run_wde(path, [[0, 5, 2]], "naive")
    assert "\n" not in str(error.value)


def test_task_without_adapters_is_refused(dirs: dict[str, Path], tmp_path: Path) -> None:
    path = shutil.copytree(dirs["native"], tmp_path / "no-lora")
    config = json.loads((path / "config.json").read_text())
    config |= {"lora_adaptations": TASKS, "default_task": "separation"}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no LoRA weights"):
        run_wde(path, [[0, 5, 2]], "naive")


def test_the_adapters_are_read_from_the_model_directory(dirs: dict[str, Path], no_lora_dir: Path) -> None:
    assert engine_config(dirs["published/base"]).model_config.task_adapters == TaskAdapters(tuple(TASKS))
    default = engine_config(dirs["published/separation"]).model_config.task_adapters
    assert default == TaskAdapters(tuple(TASKS), "separation")
    assert engine_config(no_lora_dir).model_config.task_adapters is None
    assert engine_config(dirs["native"]).model_config.task_adapters is None


# ---- against transformers and sentence-transformers -------------------------------------------------------
@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_last_hidden_state_matches_transformers(
    dirs: dict[str, Path], layout: str, backend_name: str
) -> None:
    path = dirs[layout]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)  # varlen_cpu on a CPU without its kernel
    token_ids = random_token_ids(dirs["native"], SEED)
    expected = hf_last_hidden(reference_of(path), token_ids, pad_id=1)
    hidden, _ = run_wde(path, token_ids, backend_name)
    assert hidden.shape == expected.shape
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    assert max_abs_diff(hidden, expected) <= atol


def test_adapters_change_the_output(dirs: dict[str, Path]) -> None:
    """Guard on the test itself: each task's merged LoRA moves the hidden states far past the tolerance."""
    token_ids = random_token_ids(dirs["native"], SEED)
    base, _ = run_wde(dirs["published/base"], token_ids, "naive")
    for task in TASKS:
        adapted, _ = run_wde(dirs[f"published/{task}"], token_ids, "naive")
        assert max_abs_diff(adapted, base) > 1e-2, task


@pytest.mark.parametrize("layout", LAYOUTS)
def test_encode_equals_sentence_transformers(dirs: dict[str, Path], layout: str) -> None:
    from sentence_transformers import SentenceTransformer

    path = dirs[layout]
    texts = training_texts()[:NUM_TEXTS]
    expected = SentenceTransformer(str(reference_of(path)), device="cpu").encode(texts)
    with llm_of(path) as llm:
        assert llm.model_config.pooling.method == "mean" and llm.model_config.pooling.normalize
        assert llm.model_config.max_model_len == MAX_POSITIONS
        batched = np.stack([output.embedding for output in llm.encode(texts)])
        singles = np.stack([llm.encode([text])[0].embedding for text in texts[:8]])
    assert_close_to_sentence_transformers(batched, expected)
    assert max_abs_diff(batched[:8], singles) <= FP32_ATOL


# ---- task adapters per request -----------------------------------------------------------------------------
def run_wde_tasks(
    path: Path, token_ids: list[list[int]], backend_name: str, tasks: list[str | None]
) -> torch.Tensor:
    """Our model on one flat batch whose sequences name these tasks (their prompt_name), as the runner
    builds it: [num_tokens, hidden_size]."""
    model_config = engine_config(path).model_config
    model = load_model(model_config, backend_chooser(backend_name, torch.float32), DEVICE, torch.float32)
    requests = [
        Request(str(i), token_ids=ids, params=PoolingParams(prompt_name=task))
        for i, (ids, task) in enumerate(zip(token_ids, tasks, strict=True))
    ]
    adapters = model_config.task_adapters
    batch = InputBatch.build(requests, BACKENDS[backend_name], DEVICE, task_adapters=adapters)
    with torch.inference_mode(), set_forward_context(batch.attn_metadata, batch.adapters):
        return model(batch.input_ids, batch.positions, batch.token_type_ids).float()


def rows_of_tasks(
    references: dict[str | None, torch.Tensor], token_ids: list[list[int]], tasks: list[str | None]
) -> torch.Tensor:
    """Each sequence's rows from its task's reference: [num_tokens, hidden_size]."""
    parts, start = [], 0
    for ids, task in zip(token_ids, tasks, strict=True):
        parts.append(references[task][start : start + len(ids)])
        start += len(ids)
    return torch.cat(parts)


@pytest.mark.parametrize("backend_name", CPU_BACKEND_NAMES)
@pytest.mark.parametrize("layout", ["published/base", "published/retrieval.query"])
def test_each_request_runs_with_its_task_adapter(
    dirs: dict[str, Path],
    task_references: dict[str | None, torch.Tensor],
    layout: str,
    backend_name: str,
) -> None:
    """One model, every task: a batch of one task each (one adapter for every row) and a batch mixing all
    of them and none (the per-row mask) equal transformers with that task's LoRA merged; without a task a
    request runs with default_task's adapter, else the base weights."""
    path = dirs[layout]
    refusal = backend_refusal(path, backend_name)
    if refusal is not None:
        pytest.skip(refusal)  # varlen_cpu on a CPU without its kernel
    token_ids = random_token_ids(dirs["native"], SEED)
    default = engine_config(path).model_config.task_adapters.default  # type: ignore[union-attr]
    references = task_references | {None: task_references[default]}
    atol = VARLEN_ATOL if backend_name == "varlen_cpu" else FP32_ATOL
    for task in [None, *TASKS]:
        one_task = run_wde_tasks(path, token_ids, backend_name, [task] * len(token_ids))
        assert max_abs_diff(one_task, references[task]) <= atol, task
    mixed = run_wde_tasks(path, token_ids, backend_name, MIXED_TASKS)
    assert max_abs_diff(mixed, rows_of_tasks(references, token_ids, MIXED_TASKS)) <= atol


def test_each_task_equals_sentence_transformers(dirs: dict[str, Path]) -> None:
    """``encode(texts, prompt_name=task)`` on one model == sentence-transformers' ``encode(texts,
    prompt_name=task)`` over that task's merged checkpoint (its prompt and its adapter)."""
    from sentence_transformers import SentenceTransformer

    texts = training_texts()[:NUM_TEXTS]
    with llm_of(dirs["published/retrieval.query"]) as llm:
        for task in TASKS:
            reference = SentenceTransformer(str(reference_of(dirs[f"published/{task}"])), device="cpu")
            expected = reference.encode(texts, prompt_name=task)
            got = np.stack([output.embedding for output in llm.encode(texts, prompt_name=task)])
            assert_close_to_sentence_transformers(got, expected)


def test_a_mixed_batch_equals_each_single(dirs: dict[str, Path]) -> None:
    """Requests of two tasks and of none, queued together, run as one batch and answer as each alone."""
    texts = training_texts()[:9]
    tasks = [TASKS[0], TASKS[1], None] * 3
    with llm_of(dirs["published/base"]) as llm:
        singles = encode_each(llm, texts, tasks)
        mixed = encode_in_one_batch(llm, texts, tasks)
    assert max_abs_diff(mixed, singles) <= FP32_ATOL
    assert max_abs_diff(singles[0], singles[1]) > 1e-2  # the tasks differ (a guard on the test itself)


def encode_each(llm: wde.LLM, texts: list[str], tasks: list[str | None]) -> np.ndarray:
    """Each text alone with its task: ``[num_texts, hidden_size]``."""
    pairs = zip(texts, tasks, strict=True)
    return np.stack([llm.encode([text], prompt_name=task)[0].embedding for text, task in pairs])


def encode_in_one_batch(llm: wde.LLM, texts: list[str], tasks: list[str | None]) -> np.ndarray:
    """The texts with their tasks, queued together and run as one batch: ``[num_texts, hidden_size]``."""
    for i, (text, task) in enumerate(zip(texts, tasks, strict=True)):
        llm.engine.add_request(str(i), text, PoolingParams(prompt_name=task))
    outputs = {output.request_id: output for output in llm.engine.step()}
    assert llm.engine.last_step_stats.num_scheduled_seqs == len(texts)  # one batch
    while llm.engine.has_unfinished_requests():
        outputs |= {output.request_id: output for output in llm.engine.step()}
    return np.stack([outputs[str(i)].embedding for i in range(len(texts))])  # type: ignore[union-attr]


def test_a_task_the_checkpoint_lacks_is_refused(no_lora_dir: Path) -> None:
    """config.json lists the tasks but the weights have no LoRA: a request naming a task would get its
    prompt on the base weights, so it is refused; other requests run."""
    with llm_of(no_lora_dir) as llm:
        with pytest.raises(
            ValueError, match=r"prompt_name 'separation' names a task adapter .* no LoRA weights"
        ):
            llm.encode(["x"], prompt_name="separation")
        assert llm.encode(["x"])[0].embedding.shape == (SIZES["hidden_size"],)


# ---- int8 --------------------------------------------------------------------------------------------------
# int8 block linears (qkv, output, fc1, fc2; the adapters beside them stay float32) on this tiny model: max
# abs ~6.6e-3 from float32 in a normalized embedding, min cosine ~0.9998, for the base weights and every task.
# The bound leaves 3x room, and stays far below how far two tasks' embeddings lie apart (~8e-2 max abs): an
# adapter lost under quantization fails it.
INT8_ATOL = 2e-2


@pytest.mark.slow  # int8 compiles its matmuls
def test_int8_close_to_float32_with_each_task_and_a_mixed_batch(dirs: dict[str, Path]) -> None:
    """Under int8 each request still runs with its task adapter: one task's embeddings and a mixed-task
    batch's are within INT8_ATOL (and test_int8's MIN_COSINE_TINY) of float32's; the mixed batch equals each
    request alone within test_int8's BATCH_TOLERANCE (int8's per-token scales do not see batch-mates, but
    attention's last-bit rounding in a padded group can move one activation an int8 step; measured <= 2.7e-4),
    far below a wrong adapter's ~8e-2."""
    from tests.models.test_int8 import BATCH_TOLERANCE, MIN_COSINE_TINY
    from wde.layers.quantization.int8_linear import Int8Linear

    texts = training_texts()[:NUM_TEXTS]
    mixed_tasks = [None, *TASKS, TASKS[0], None]
    with llm_of(dirs["published/base"]) as exact, llm_of(dirs["published/base"], quantization="int8") as int8:
        linears = [m for m in int8.engine.runner.model.modules() if isinstance(m, Int8Linear)]
        assert len(linears) == 4 * SIZES["num_hidden_layers"]
        got = np.stack([output.embedding for output in int8.encode(texts, prompt_name=TASKS[0])])
        expected = np.stack([output.embedding for output in exact.encode(texts, prompt_name=TASKS[0])])
        other_task = np.stack([output.embedding for output in exact.encode(texts, prompt_name=TASKS[1])])
        mixed = encode_in_one_batch(int8, texts[: len(mixed_tasks)], mixed_tasks)
        singles = encode_each(int8, texts[: len(mixed_tasks)], mixed_tasks)
        mixed_expected = encode_in_one_batch(exact, texts[: len(mixed_tasks)], mixed_tasks)  # == singles
    assert max_abs_diff(got, expected) <= INT8_ATOL
    assert (got * expected).sum(axis=1).min() >= MIN_COSINE_TINY  # both normalized
    assert max_abs_diff(got, other_task) > 2 * INT8_ATOL  # the adapter matters (a guard on the test)
    assert max_abs_diff(mixed, mixed_expected) <= INT8_ATOL
    assert (mixed * mixed_expected).sum(axis=1).min() >= MIN_COSINE_TINY
    assert max_abs_diff(mixed, singles) <= BATCH_TOLERANCE


@pytest.mark.shared_data  # the acceptance text: real documents, not the generated corpus
@pytest.mark.parametrize("layout", ["published/base", "published/retrieval.passage"])
def test_published_layout_equals_sentence_transformers_on_docs(dirs: dict[str, Path], layout: str) -> None:
    from sentence_transformers import SentenceTransformer

    from tests.shared_data import read_texts

    path = dirs[layout]
    texts = read_texts("docs.jsonl", limit=NUM_TEXTS)
    expected = SentenceTransformer(str(reference_of(path)), device="cpu").encode(texts)
    with llm_of(path) as llm:
        got = np.stack([output.embedding for output in llm.encode(texts)])
    assert_close_to_sentence_transformers(got, expected)


@pytest.mark.anyio
async def test_a_task_over_http(dirs: dict[str, Path], no_lora_dir: Path) -> None:
    """TEI's /embed: prompt_name picks the adapter; one the checkpoint lacks is a 422 "Validation" naming the
    field, as an unknown prompt_name."""
    from tests.server.conftest import served_model

    with llm_of(dirs["published/base"]) as llm:
        expected = llm.encode(["x"], prompt_name="retrieval.passage")[0].embedding
    async with served_model(dirs["published/base"]) as client:
        response = await client.post("/embed", json={"inputs": "x", "prompt_name": "retrieval.passage"})
    assert response.status_code == 200, response.text
    assert max_abs_diff(np.asarray(response.json()[0]), expected) <= FP32_ATOL
    async with served_model(no_lora_dir) as client:
        response = await client.post("/embed", json={"inputs": "x", "prompt_name": "retrieval.passage"})
    assert response.status_code == 422, response.text
    assert response.json()["error_type"] == "Validation"
    assert "prompt_name 'retrieval.passage' names a task adapter" in response.json()["error"]


@pytest.mark.anyio
async def test_a_task_in_openais_embeddings_body_as_jinas_api_takes_it(dirs: dict[str, Path]) -> None:
    """/v1/embeddings' ``task`` (Jina's API field) picks the adapter and its prompt, as prompt_name does;
    an unknown task is a 422 naming the field and the tasks there are."""
    from tests.server.conftest import served_model

    with llm_of(dirs["published/base"]) as llm:
        expected = llm.encode(["x"], prompt_name="retrieval.query")[0].embedding
    async with served_model(dirs["published/base"]) as client:
        answer = await client.post("/v1/embeddings", json={"input": "x", "task": "retrieval.query"})
        unknown = await client.post("/v1/embeddings", json={"input": "x", "task": "summarize"})
    assert answer.status_code == 200, answer.text
    assert max_abs_diff(np.asarray(answer.json()["data"][0]["embedding"]), expected) <= FP32_ATOL
    assert unknown.status_code == 422, unknown.text
    assert "task 'summarize' is not a task of this model (known: retrieval.query" in unknown.text
