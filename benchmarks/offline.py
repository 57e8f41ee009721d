"""Offline throughput: ``LLM.encode`` against ``SentenceTransformer.encode`` on the same texts and model, in
one run: tokens/s and texts/s (min / median / max over repeats), useful GFLOP/s against a ``F.linear`` peak
measured in the same run (benchmarks.flops), and the min cosine of our embeddings against the float32
reference, so a speed-up cannot hide a wrong answer. Every ratio is against sentence-transformers float32;
with ``--dtype bfloat16`` sentence-transformers bfloat16, wde and the peers run in bfloat16 too.

    python -m benchmarks.offline --data ../shared/data/docs.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks import peers
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.flops import encoder_flops, matmul_peak_gflops


@dataclass
class Timing:
    name: str
    seconds: list[float]
    num_tokens: int
    num_texts: int
    flops: int  # useful FLOPs of one pass over the texts (benchmarks.flops.encoder_flops)
    peak_gflops: float  # linear peak of this row's dtype, measured in the same run

    def tokens_per_s(self, seconds: float) -> float:
        return self.num_tokens / seconds

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def row(self, baseline: Timing) -> str:
        """A markdown table row; the ratio is throughput over the baseline's (medians), GFLOP/s also as a
        share of the measured matmul peak."""
        best, median, worst = min(self.seconds), self.median, max(self.seconds)
        gflops = self.flops / median / 1e9
        ratio = f"{baseline.median / median:.2f}x"
        return (
            f"| {self.name} | {self.tokens_per_s(median):,.0f} | {self.tokens_per_s(worst):,.0f} / "
            f"{self.tokens_per_s(best):,.0f} | {self.num_texts / median:,.1f} | "
            f"{gflops:,.1f} ({gflops / self.peak_gflops:.0%} of peak) | "
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
        prog="wde bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="wde bench --server URL [--concurrency 1 32 ...]: the HTTP load benchmark against a running "
        "server instead (wde bench --server URL --help lists its flags).",
    )
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
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
    engine_config = llm.engine.engine_config
    print(
        f"# {len(texts)} texts, {num_tokens:,} tokens (max_model_len {llm.model_config.max_model_len}), "
        f"dtype {args.dtype}, {torch.get_num_threads()} threads, "
        f"backend {llm.engine.runner.attn_backend_cls.name}, "
        f"executor {engine_config.device_config.executor}, "
        f"max_num_batched_tokens {engine_config.scheduler_config.max_num_batched_tokens}, "
        f"{args.repeats} repeats"
    )
    # 1. the matmul peak of each dtype in play
    dtypes = dict.fromkeys(["float32", args.dtype])
    peaks = {name: matmul_peak_gflops(llm.model_config.hf_config, getattr(torch, name)) for name in dtypes}
    print(
        f"# useful work {flops / 1e9:,.1f} GFLOP ({flops / num_tokens / 1e6:.1f} MFLOP/token); linear peak "
        "on the largest GEMM in this run: "
        + ", ".join(
            f"{name} {peak:,.1f} GFLOP/s (ceiling {peak * 1e9 * num_tokens / flops:,.0f} tokens/s)"
            for name, peak in peaks.items()
        )
    )

    def timing(name: str, dtype: str, seconds: list[float]) -> Timing:
        return Timing(name, seconds, num_tokens, len(texts), flops, peaks[dtype])

    # 2. sentence-transformers float32: the baseline of every ratio and the reference embeddings
    rows: list[Timing] = []
    for dtype in dtypes:
        st_model = SentenceTransformer(
            model_path, device="cpu", model_kwargs={"torch_dtype": getattr(torch, dtype)}
        )
        seconds, embeddings = time_runs(
            lambda st_model=st_model: st_model.encode(
                texts, batch_size=args.st_batch_size, convert_to_numpy=True
            ),
            args.repeats,
        )
        rows.append(timing(f"sentence-transformers {dtype} (batch {args.st_batch_size})", dtype, seconds))
        if dtype == "float32":
            reference = embeddings.astype(np.float32)
        del st_model
    # 3. wde, then the peers, in the requested dtype
    wde_seconds, ours = time_runs(lambda: np.stack([o.embedding for o in llm.encode(texts)]), args.repeats)
    rows.append(timing(f"wde LLM.encode {args.dtype}", args.dtype, wde_seconds))
    print(
        "| system | tokens/s (median) | tokens/s (min / max) | texts/s | useful GFLOP/s "
        "| vs sentence-transformers float32 |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row.row(rows[0]))
    for peer in dict.fromkeys(args.peer):
        for label, seconds in peers.measure(peer, model_path, texts, args.dtype, args.repeats):
            print(timing(f"{label} {args.dtype}", args.dtype, seconds).row(rows[0]), flush=True)
    # 4. accuracy against the float32 reference
    ours = ours.astype(np.float32)
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    print(
        f"wde {args.dtype} against sentence-transformers float32: min cosine {cosine.min():.7f}, "
        f"max abs diff {np.abs(ours - reference).max():.2e}"
    )


if __name__ == "__main__":
    main()
