"""Offline throughput: ``LLM.encode`` against ``SentenceTransformer.encode`` on the same texts, model and
dtype, in one run: tokens/s and texts/s (min / median / max over repeats), useful GFLOP/s against a
``torch.mm`` peak measured in the same run (wde.bench.flops), and the min cosine of our embeddings against
the reference, so a speed-up cannot hide a wrong answer.

    python -m wde.bench.offline --data ../shared/data/docs.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wde.bench import peers
from wde.bench.dataset import load_texts
from wde.bench.flops import encoder_flops, matmul_peak_gflops


@dataclass
class Timing:
    name: str
    seconds: list[float]
    num_tokens: int
    num_texts: int
    flops: int  # useful FLOPs of one pass over the texts (wde.bench.flops.encoder_flops)

    def tokens_per_s(self, seconds: float) -> float:
        return self.num_tokens / seconds

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def row(self, baseline: Timing, peak_gflops: float) -> str:
        """A markdown table row; the ratio is throughput over the baseline's (medians), GFLOP/s also as a
        share of the measured matmul peak."""
        best, median, worst = min(self.seconds), self.median, max(self.seconds)
        ratio = f"{baseline.median / median:.2f}x"
        return (
            f"| {self.name} | {self.tokens_per_s(median):,.0f} | {self.tokens_per_s(worst):,.0f} / "
            f"{self.tokens_per_s(best):,.0f} | {self.num_texts / median:,.1f} | "
            f"{self.flops / median / 1e9:,.1f} ({self.flops / median / 1e9 / peak_gflops:.0%} of peak) | "
            f"{ratio} |"
        )


def time_runs(run: Callable[[], np.ndarray], repeats: int) -> tuple[list[float], np.ndarray]:
    run()  # warm-up (kernel selection, allocator)
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - start)
    return seconds, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="../shared/data/docs.jsonl")
    parser.add_argument(
        "--model", default=None, help="local HF directory (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--limit", type=int, default=None, help="use the first N texts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--st-batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--executor", default="auto", choices=["auto", "sync", "async"])
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="torch.compile wde's MLP blocks")
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        choices=peers.PEER_NAMES,
        help="also time a peer engine from its own venv (repeatable): infinity (`make peer-infinity`), "
        "vllm (`make peer-vllm`)",
    )
    args = parser.parse_args(argv)
    if missing_peers := peers.missing(args.peer):
        parser.error("\n".join(missing_peers))

    import torch
    from sentence_transformers import SentenceTransformer

    from wde import LLM
    from wde.engine_args import default_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = args.model or default_model_path()
    texts = load_texts(args.data, args.limit)

    llm = LLM(
        model_path,
        dtype=args.dtype,
        executor=args.executor,
        max_num_batched_tokens=args.max_num_batched_tokens,
        compile_model=args.compile,
    )
    seq_lens = [len(enc.token_ids) for enc in llm.engine.tokenizer.encode_batch(texts)]
    num_tokens, flops = sum(seq_lens), encoder_flops(llm.model_config.hf_config, seq_lens)
    st_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    st_model = SentenceTransformer(model_path, device="cpu", model_kwargs={"torch_dtype": st_dtype})
    engine_config = llm.engine.engine_config
    print(
        f"# {len(texts)} texts, {num_tokens:,} tokens (max_model_len {llm.model_config.max_model_len}), "
        f"dtype {args.dtype}, {torch.get_num_threads()} threads, "
        f"backend {llm.engine.runner.attn_backend.name}, executor {engine_config.device_config.executor}, "
        f"max_num_batched_tokens {engine_config.scheduler_config.max_num_batched_tokens}, "
        f"{args.repeats} repeats"
    )
    peak = matmul_peak_gflops(llm.model_config.hf_config, st_dtype)
    print(
        f"# useful work {flops / 1e9:,.1f} GFLOP ({flops / num_tokens / 1e6:.1f} MFLOP/token); "
        f"torch.mm peak on the largest GEMM in this run: {peak:,.1f} GFLOP/s "
        f"(ceiling {peak * 1e9 * num_tokens / flops:,.0f} tokens/s)"
    )

    st_seconds, reference = time_runs(
        lambda: st_model.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True), args.repeats
    )
    wde_seconds, ours = time_runs(lambda: np.stack([o.embedding for o in llm.encode(texts)]), args.repeats)
    reference = reference.astype(np.float32)
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))

    st = Timing(
        f"sentence-transformers (batch {args.st_batch_size})", st_seconds, num_tokens, len(texts), flops
    )
    wde = Timing("wde LLM.encode", wde_seconds, num_tokens, len(texts), flops)
    print(
        "| system | tokens/s (median) | tokens/s (min / max) | texts/s | useful GFLOP/s "
        "| vs sentence-transformers |"
    )
    print("|---|---|---|---|---|---|")
    print(st.row(st, peak))
    print(wde.row(st, peak))
    for peer in dict.fromkeys(args.peer):
        for label, seconds in peers.measure(peer, model_path, texts, args.dtype, args.repeats):
            print(Timing(label, seconds, num_tokens, len(texts), flops).row(st, peak), flush=True)
    print(
        f"min cosine vs sentence-transformers: {cosine.min():.7f}; "
        f"max abs diff: {np.abs(ours - reference).max():.2e}"
    )


if __name__ == "__main__":
    main()
