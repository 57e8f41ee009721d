"""The measurements of ``benchmarks.gpu_modes``, each on one device (``cuda``, or ``cpu`` for --smoke runs):
wde's start-up and tokens/s for one engine configuration, sentence-transformers' tokens/s on the same texts,
and the device's matmul rate (the FLOP ceiling the table is divided by)."""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class WdeRun:
    startup_s: float  # LLM(...): load, profile run, start-up captures
    tokens_per_s: float  # median over the timed passes
    num_tokens: int
    backend: str  # the attention backend the engine ran
    captured: list[int] = field(default_factory=list)  # graph buckets captured by the end
    embeddings: np.ndarray | None = None  # [num_texts, dim] of the warm-up pass
    ids_tokens_per_s: float | None = None  # the same texts given as token ids (no tokenizer in the loop)
    busy_share: float | None = None  # the GPU's busy share over the timed passes from text (None on CPU)


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def release(device: str) -> None:
    """Free what the last system held; on CUDA, say on stderr what stays allocated (a leak across the
    bench's dozens of engines would end in an out-of-memory error rows later)."""
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        allocated = torch.cuda.memory_allocated() / 2**20
        print(f"gpu_modes: {allocated:,.0f} MiB still allocated after release", file=sys.stderr, flush=True)


def measure_wde(
    model: str, texts: list[str], repeats: int, device: str, from_ids: bool = True, **engine_args: object
) -> WdeRun:
    """Start an engine, encode the texts once untimed (warm-up, lazy captures), then ``repeats`` timed; with
    ``from_ids`` the same again from their token ids."""
    from wde import LLM

    synchronize(device)
    start = time.perf_counter()
    llm = LLM(model, device=device, **engine_args)
    startup_s = time.perf_counter() - start
    try:
        outputs = llm.encode(texts)
        num_tokens = sum(output.num_tokens for output in outputs)
        runner = llm.engine.runner
        busy_clock = getattr(runner, "busy_clock", None)  # CUDA only
        if busy_clock is not None:
            busy_clock.reset()
        encode = llm.encode
        seconds = timed_passes(lambda: encode(texts), repeats)
        busy_share = busy_clock.share() if busy_clock is not None else None
        ids_tokens_per_s = None
        if from_ids:
            prompts = [{"prompt_token_ids": e.token_ids} for e in llm.engine.tokenizer.encode_batch(texts)]
            llm.encode(prompts)  # warm-up
            ids_tokens_per_s = num_tokens / statistics.median(timed_passes(lambda: encode(prompts), repeats))
        graphs = runner.cuda_graphs
        return WdeRun(
            startup_s=startup_s,
            tokens_per_s=num_tokens / statistics.median(seconds),
            num_tokens=num_tokens,
            backend=runner.attn_backend_cls.name,
            captured=sorted(graphs.graphs) if graphs is not None else [],
            embeddings=np.stack([output.embedding for output in outputs]),
            ids_tokens_per_s=ids_tokens_per_s,
            busy_share=busy_share,
        )
    finally:
        llm.engine.shutdown()
        del llm
        release(device)


def timed_passes(run: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls (at least one)."""
    seconds = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


@dataclass
class StRun:
    tokens_per_s: float | None  # None when no pass was timed
    embeddings: np.ndarray  # [num_texts, dim] float32


def measure_sentence_transformers(
    model: str, texts: list[str], repeats: int, device: str, dtype: str, batch_size: int
) -> StRun:
    """``SentenceTransformer.encode`` over the texts, once untimed then ``repeats`` timed (median), with the
    model cast to ``dtype``: how its users run it on a GPU (``.half()``), attention by its default (SDPA).
    Tokens are counted by its own tokenizer and truncation."""
    import torch
    from sentence_transformers import SentenceTransformer

    model_st = SentenceTransformer(model, device=device).to(getattr(torch, dtype))
    try:
        embeddings = model_st.encode(texts, batch_size=batch_size, convert_to_numpy=True)  # warm-up
        seconds = []
        for _ in range(repeats):
            synchronize(device)
            start = time.perf_counter()
            model_st.encode(texts, batch_size=batch_size, convert_to_numpy=True)
            seconds.append(time.perf_counter() - start)
        tokens_per_s = None
        if seconds:
            preprocess = getattr(model_st, "preprocess", None) or model_st.tokenize  # tokenize: ST < 6
            num_tokens = int(preprocess(texts)["attention_mask"].sum())
            tokens_per_s = num_tokens / statistics.median(seconds)
        return StRun(tokens_per_s, np.asarray(embeddings, dtype=np.float32))
    finally:
        del model_st
        release(device)


def matmul_flops_per_s(device: str, size: int, repeats: int = 10) -> float:
    """bf16 ``F.linear`` of ``[size, size] x [size, size]`` on random data: FLOP/s, best of ``repeats``
    after three warm-ups (CUDA events on a GPU)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator(device).manual_seed(0)
    x, weight = (
        torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator) for _ in range(2)
    )
    for _ in range(3):
        F.linear(x, weight)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            F.linear(x, weight)
            end.record()
            end.synchronize()
            seconds = begin.elapsed_time(end) / 1000
        else:
            start = time.perf_counter()
            F.linear(x, weight)
            seconds = time.perf_counter() - start
        best = min(best, seconds)
    return 2 * size**3 / best
