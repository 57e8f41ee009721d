"""On CUDA: every backend equals naive, CUDA-graph replay equals eager, the auto budget fits memory.

Tolerances: float16/bfloat16 keep ~3/2 significant digits; on L2-normalized embeddings we ask for cosine
>= 0.999 (bf16) / 0.9995 (fp16) against the float32 naive oracle, and max abs diff <= 2e-2 / 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.shared_data import read_texts
from wde import LLM
from wde.layers.attention.selector import BACKENDS

MIN_COSINE = {"float16": 0.9995, "bfloat16": 0.999}
MAX_ABS_DIFF = {"float16": 1e-2, "bfloat16": 2e-2}
GRAPH_ATOL = 1e-6  # replay runs the same kernels as eager: equal up to reduction order


def embed(llm: LLM, texts: list[str]) -> np.ndarray:
    return np.stack([out.embedding for out in llm.encode(texts)])


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return read_texts("docs.jsonl", 200)


@pytest.fixture(scope="module")
def oracle(texts: list[str]) -> np.ndarray:
    return embed(
        LLM(device="cuda", dtype="float32", attention_backend="naive", cuda_graph_mode="none"), texts
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_backend_equals_naive(backend: str, dtype: str, texts: list[str], oracle: np.ndarray) -> None:
    available, reason = BACKENDS[backend].is_available("cuda", getattr(torch, dtype))
    if not available:
        pytest.skip(f"{backend}: {reason}")
    ours = embed(LLM(device="cuda", dtype=dtype, attention_backend=backend, cuda_graph_mode="none"), texts)
    cosine = (ours * oracle).sum(1)
    assert cosine.min() >= MIN_COSINE[dtype]
    assert np.abs(ours - oracle).max() <= MAX_ABS_DIFF[dtype]


@pytest.mark.parametrize("mode", ["eager", "lazy", "idle"])
def test_graph_replay_equals_eager(mode: str, texts: list[str]) -> None:
    available, reason = BACKENDS["flash_attn"].is_available("cuda", torch.float16)
    if not available:
        pytest.skip(f"cuda graphs need flash_attn: {reason}")
    common = dict(device="cuda", dtype="float16", attention_backend="flash_attn", max_num_batched_tokens=4096)
    eager = embed(LLM(cuda_graph_mode="none", **common), texts)
    llm = LLM(cuda_graph_mode=mode, cuda_graph_buckets=[512, 1024, 2048], **common)
    graphs = embed(llm, texts)
    assert llm.engine.runner.cuda_graphs.graphs  # something was captured and replayed
    assert np.abs(graphs - eager).max() <= GRAPH_ATOL
    singles = np.stack([llm.encode(text)[0].embedding for text in texts[:20]])  # small buckets
    assert np.abs(singles - eager[:20]).max() <= 1e-3


def test_auto_budget_fits_the_memory_share() -> None:
    llm = LLM(device="cuda", max_num_batched_tokens="auto", gpu_memory_utilization=0.2)
    scheduler_config = llm.engine.engine_config.scheduler_config
    assert scheduler_config.max_num_batched_tokens >= llm.model_config.max_model_len
    assert "KiB of activations per token" in scheduler_config.budget_reason
