"""On CUDA: every backend equals naive, CUDA-graph replay equals eager, the auto budget fits memory.

Tolerances: float16/bfloat16 keep ~3/2 significant digits; on L2-normalized embeddings we ask for cosine
>= 0.999 (bf16) / 0.9995 (fp16) against the float32 naive oracle, and max abs diff <= 2e-2 / 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde import LLM
from wde.layers.attention.selector import BACKENDS

MIN_COSINE = {"float16": 0.9995, "bfloat16": 0.999}
MAX_ABS_DIFF = {"float16": 1e-2, "bfloat16": 2e-2}
# Replay runs the model over the bucket's padded token count, so cuBLAS may pick other GEMM kernels (another
# split / reduction order) than eager on the unpadded batch: float16 rounding, not bit equality.
GRAPH_ATOL = 1e-3


def embed(llm: LLM, texts: list[str]) -> np.ndarray:
    return np.stack([out.embedding for out in llm.encode(texts)])


@pytest.fixture(scope="module")
def oracle(texts: list[str], bundled_model: str) -> np.ndarray:
    return embed(
        LLM(bundled_model, device="cuda", dtype="float32", attention_backend="naive", cuda_graph_mode="none"),
        texts,
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_backend_equals_naive(
    backend: str, dtype: str, texts: list[str], oracle: np.ndarray, bundled_model: str
) -> None:
    available, reason = BACKENDS[backend].is_available("cuda", getattr(torch, dtype))
    if not available:
        pytest.skip(f"{backend}: {reason}")
    llm = LLM(bundled_model, device="cuda", dtype=dtype, attention_backend=backend, cuda_graph_mode="none")
    ours = embed(llm, texts)
    cosine = (ours * oracle).sum(1)
    assert cosine.min() >= MIN_COSINE[dtype]
    assert np.abs(ours - oracle).max() <= MAX_ABS_DIFF[dtype]


GRAPH_BACKENDS = sorted(name for name, cls in BACKENDS.items() if cls.supports_cuda_graphs)


def graph_backend_or_skip(backend: str) -> None:
    available, reason = BACKENDS[backend].is_available("cuda", torch.float16)
    if not available:
        pytest.skip(f"{backend}: {reason}")


@pytest.mark.parametrize("backend", GRAPH_BACKENDS)
@pytest.mark.parametrize("mode", ["eager", "lazy", "idle"])
def test_graph_replay_equals_eager(mode: str, backend: str, texts: list[str], bundled_model: str) -> None:
    graph_backend_or_skip(backend)
    common = dict(device="cuda", dtype="float16", attention_backend=backend, max_num_batched_tokens=4096)
    eager = embed(LLM(bundled_model, cuda_graph_mode="none", **common), texts)
    llm = LLM(bundled_model, cuda_graph_mode=mode, cuda_graph_buckets=[512, 1024, 2048], **common)
    graphs = embed(llm, texts)
    assert llm.engine.runner.cuda_graphs.graphs  # something was captured and replayed
    assert not llm.engine.runner.cuda_graphs.failed
    assert np.abs(graphs - eager).max() <= GRAPH_ATOL
    singles = np.stack([llm.encode(text)[0].embedding for text in texts[:20]])  # small buckets
    assert np.abs(singles - eager[:20]).max() <= 1e-3


@pytest.mark.parametrize("backend", GRAPH_BACKENDS)
def test_lazy_mode_captures_a_bucket_on_first_use(backend: str, texts: list[str], bundled_model: str) -> None:
    """Start-up captures only the largest bucket; the first batch that fits a smaller one captures it."""
    graph_backend_or_skip(backend)
    llm = LLM(
        bundled_model,
        device="cuda",
        dtype="float16",
        attention_backend=backend,
        max_num_batched_tokens=4096,
        cuda_graph_mode="lazy",
        cuda_graph_buckets=[512, 1024, 2048],
    )
    manager = llm.engine.runner.cuda_graphs
    assert sorted(manager.graphs) == [4096]
    assert [record.when for record in manager.records] == ["startup"]
    llm.encode(texts[0])  # one short text: the 512-token bucket
    assert sorted(manager.graphs) == [512, 4096]
    assert (manager.records[-1].bucket, manager.records[-1].when) == (512, "first use")
    llm.encode(texts[1])  # replays it: no new capture
    assert len(manager.records) == 2


def test_auto_budget_fits_the_memory_share(bundled_model: str) -> None:
    llm = LLM(bundled_model, device="cuda", max_num_batched_tokens="auto", gpu_memory_utilization=0.2)
    scheduler_config = llm.engine.engine_config.scheduler_config
    assert scheduler_config.max_num_batched_tokens >= llm.model_config.max_model_len
    assert "KiB of activations per token" in scheduler_config.budget_reason


def test_the_busy_clock_counts_every_batch_and_the_default_graphs_stop_at_8192(
    texts: list[str], oracle: np.ndarray, bundled_model: str
) -> None:
    """Each batch's GPU time reaches the stats (``wde_device_busy_seconds``); with the default buckets a
    batch over 8,192 tokens runs eagerly and small ones replay, both equal to the oracle."""
    llm = LLM(bundled_model, device="cuda", dtype="float16", max_num_batched_tokens=16384)
    runner = llm.engine.runner
    runner.busy_clock.reset()
    many = embed(llm, texts * 8)  # batches over 8,192 tokens: eager
    few = embed(llm, texts[:4])  # a small batch: a graph bucket
    clock = runner.busy_clock
    assert clock.num_batches >= 2 and 0 < clock.share() <= 1
    assert runner.last_device_seconds > 0
    assert runner.cuda_graphs is not None and max(runner.cuda_graphs.buckets) == 8192
    assert min(runner.cuda_graphs.graphs) < 8192  # the small batch's bucket, captured on first use
    np.testing.assert_allclose(many[: len(texts)], oracle, atol=MAX_ABS_DIFF["float16"])
    np.testing.assert_allclose(few, oracle[:4], atol=MAX_ABS_DIFF["float16"])
