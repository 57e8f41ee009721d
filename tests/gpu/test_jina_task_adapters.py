"""On CUDA: Jina v3's task adapters per request through CUDA-graph replay (a static per-token adapter buffer,
the rows-of-several-tasks path) equal the eager forward, for every task, none, and a batch mixing them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.gpu.test_cuda_backends_and_graphs import GRAPH_ATOL, GRAPH_BACKENDS, graph_backend_or_skip
from wde import LLM
from wde.inputs import PoolingParams

TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
NUM_TEXTS = 24


@pytest.fixture(scope="module")
def jina_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny published-layout checkpoint of tests/models (random LoRA for every task, no default_task)."""
    pytest.importorskip("transformers", reason="transformers builds the tiny checkpoint")
    from transformers import JinaEmbeddingsV3Config  # noqa: F401  (transformers >= 5 has Jina v3)

    from tests.models.test_jina_embeddings_v3 import save_native, save_published

    root = tmp_path_factory.mktemp("jina_v3_gpu")
    return save_published(save_native(root / "native"), root / "published", None)


def embeddings_per_task(llm: LLM, texts: list[str]) -> dict[str | None, np.ndarray]:
    return {
        task: np.stack([output.embedding for output in llm.encode(texts, prompt_name=task)])
        for task in [None, *TASKS]
    }


def mixed_batch(llm: LLM, texts: list[str], tasks: list[str | None]) -> np.ndarray:
    """The texts queued together, each with its task: one batch."""
    for i, (text, task) in enumerate(zip(texts, tasks, strict=True)):
        llm.engine.add_request(str(i), text, PoolingParams(prompt_name=task))
    outputs = {}
    while llm.engine.has_unfinished_requests():
        outputs |= {output.request_id: output for output in llm.engine.step()}
    return np.stack([outputs[str(i)].embedding for i in range(len(texts))])


@pytest.mark.parametrize("backend", GRAPH_BACKENDS)
def test_graph_replay_runs_each_request_with_its_adapter(backend: str, jina_dir: Path) -> None:
    from tests.tiny_models import training_texts

    graph_backend_or_skip(backend)
    texts = training_texts()[:NUM_TEXTS]
    tasks = [(None, *TASKS)[i % (len(TASKS) + 1)] for i in range(len(texts))]
    common = dict(device="cuda", dtype="float16", attention_backend=backend, max_num_batched_tokens=4096)
    eager = embeddings_per_task(LLM(str(jina_dir), cuda_graph_mode="none", **common), texts)
    llm = LLM(str(jina_dir), cuda_graph_mode="eager", cuda_graph_buckets=[256, 1024], **common)
    graphs = embeddings_per_task(llm, texts)
    mixed = mixed_batch(llm, texts, tasks)
    assert llm.engine.runner.cuda_graphs.graphs and not llm.engine.runner.cuda_graphs.failed
    for task in [None, *TASKS]:
        assert np.abs(graphs[task] - eager[task]).max() <= GRAPH_ATOL, task
    expected = np.stack([eager[task][i] for i, task in enumerate(tasks)])
    assert np.abs(mixed - expected).max() <= GRAPH_ATOL
    assert np.abs(eager[TASKS[0]] - eager[None]).max() > 1e-2  # the adapters matter (a guard on the test)
