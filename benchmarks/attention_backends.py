"""CPU attention backends compared on real lengths, two ways, each timed interleaved (one warm-up pass, then
one pass of each backend in turn per repeat: benchmarks.interleave):

- per layer (default): the texts are tokenized with the model's tokenizer and cut into the scheduler's
  batches (``--max-num-batched-tokens``, the CPU default 2,048); one attention layer of the model's shape
  (q / k / v as strided views of a fused projection) runs on every batch with each backend. The batch
  metadata is built untimed (once per batch, shared by all layers; a grouped SDPA layer's length groups are
  built on the warm-up pass); the time is the forward alone, summed over the batches.
- ``--end-to-end``: one ``LLM(attention_backend=...)`` per backend; ``LLM.encode`` tokens/s over the texts,
  and the min cosine of each backend's embeddings against the first backend's.

    python -m benchmarks.attention_backends --limit 1000
    python -m benchmarks.attention_backends --limit 1000 --end-to-end --repeats 3
    WDE_VARLEN_ISA=avx2 python -m benchmarks.attention_backends  # the AVX2 kernel on an AVX-512 CPU
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.interleave import InProcessSystem, time_interleaved


def batches_of(seq_lens: list[int], max_num_batched_tokens: int) -> list[list[int]]:
    """The lengths in arrival order, cut where the next one would pass the token budget."""
    batches: list[list[int]] = [[]]
    for seq_len in seq_lens:
        if batches[-1] and sum(batches[-1]) + seq_len > max_num_batched_tokens:
            batches.append([])
        batches[-1].append(seq_len)
    return batches


def median(values: list[float]) -> float:
    return float(np.median(values))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument(
        "--model", default=None, help="local HF directory (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--limit", type=int, default=1000, help="use the first N texts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument(
        "--backend", action="append", default=None, help="repeatable (default: varlen_cpu and torch_sdpa)"
    )
    parser.add_argument("--end-to-end", action="store_true", help="time LLM.encode instead of one layer")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch's intra-op threads (default: torch's)"
    )
    return parser


def progress(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


def print_header(llm: Any, texts: list[str], seq_lens: list[int], args: argparse.Namespace) -> None:
    import torch

    from wde.layers.attention.backends import varlen_kernel

    variant, reason = varlen_kernel.chosen_variant()
    kernel = variant.isa if variant else f"none ({reason})"
    print(f"# CPU {cpu_model()}; ISA flags: {' '.join(isa_flags(cpu_flags()))}")
    print(f"# varlen kernel: {kernel}; {torch.get_num_threads()} threads")
    print(
        f"# {len(texts)} texts of {args.data}: {sum(seq_lens):,} tokens (mean {np.mean(seq_lens):.0f}, "
        f"max {max(seq_lens)}, max_model_len {llm.model_config.max_model_len})"
    )


def per_layer(
    args: argparse.Namespace, names: list[str], hf_config: dict[str, Any], seq_lens: list[int]
) -> None:
    import torch

    from wde.layers.attention.selector import BACKENDS
    from wde.layers.attention.spec import AttentionSpec

    # 1. the model's layer shape, the scheduler's batches, inputs and metadata per backend
    num_heads = hf_config["num_attention_heads"]
    head_size = hf_config.get("head_dim") or hf_config["hidden_size"] // num_heads
    spec = AttentionSpec(num_heads=num_heads, head_size=head_size)
    batches = batches_of(seq_lens, args.max_num_batched_tokens)
    print(
        f"# {len(batches)} batches of <= {args.max_num_batched_tokens} tokens; one layer of {spec.describe()}"
    )
    attention_flops = sum(
        4 * n * n * head_size * num_heads for n in seq_lens
    )  # QK^T and PV, 2 per multiply-add
    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(sum(batch), 3, num_heads, head_size, generator=generator).unbind(1) for batch in batches
    ]
    runs = {}
    for name in names:
        backend_cls = BACKENDS[name]
        usable, why = backend_cls.is_available("cpu", torch.float32)
        if not usable:
            print(f"# {name} skipped: {why}")
            continue
        metadata = [backend_cls.build_metadata(batch, torch.device("cpu")) for batch in batches]
        runs[name] = (backend_cls(spec), metadata)
    # 2. interleaved passes (one warm-up)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(-1, args.repeats):
        for name, (backend, metadata) in runs.items():
            start = time.perf_counter()
            for (q, k, v), batch_metadata in zip(inputs, metadata, strict=True):
                backend.forward(q, k, v, batch_metadata)
            if repeat >= 0:
                seconds[name].append(time.perf_counter() - start)
    # 3. the table, against the last backend
    baseline = median(seconds[names[-1]]) if names[-1] in seconds else None
    print(f"| backend | ms per layer (median of {args.repeats}) | min / max | GFLOP/s | vs {names[-1]} |")
    print("|---|---:|---:|---:|---:|")
    for name, values in seconds.items():
        ratio = f"{baseline / median(values):.2f}x" if baseline else "-"
        print(
            f"| {name} | {median(values) * 1e3:.1f} | {min(values) * 1e3:.1f} / {max(values) * 1e3:.1f} | "
            f"{attention_flops / median(values) / 1e9:.1f} | {ratio} |"
        )


def end_to_end(args: argparse.Namespace, names: list[str], texts: list[str], num_tokens: int) -> None:
    from wde import LLM

    systems = []
    for name in names:
        llm = LLM(args.model, attention_backend=name) if args.model else LLM(attention_backend=name)
        systems.append(
            InProcessSystem(
                f"wde LLM.encode float32 [{name}]",
                "float32",
                lambda batch, llm=llm: np.stack([output.embedding for output in llm.encode(batch)]),
                texts,
            )
        )
    seconds = time_interleaved(systems, args.repeats, progress)
    reference = systems[0].last_embeddings()
    header = f"| LLM.encode | tokens/s (median of {args.repeats}) | min / max | vs {names[-1]} |"
    print(header + f" min cos vs {names[0]} |")
    print("|---|---:|---:|---:|---:|")
    for system, values in zip(systems, seconds, strict=True):
        ours = system.last_embeddings()
        cosine = (ours * reference).sum(1) / (
            np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
        )
        speed = f"{num_tokens / max(values):,.0f} / {num_tokens / min(values):,.0f}"
        ratio = median(seconds[-1]) / median(values)
        tokens_per_s = num_tokens / median(values)
        print(f"| {system.label} | {tokens_per_s:,.0f} | {speed} | {ratio:.2f}x | {cosine.min():.7f} |")


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import torch

    from wde import LLM

    if args.threads:
        torch.set_num_threads(args.threads)

    names = args.backend or ["varlen_cpu", "torch_sdpa"]
    llm = LLM(args.model) if args.model else LLM()
    texts = load_texts(args.data, args.limit)
    seq_lens = [len(enc.token_ids) for enc in llm.engine.tokenizer.encode_batch(texts)]
    print_header(llm, texts, seq_lens, args)
    hf_config = llm.model_config.hf_config
    del llm
    if args.end_to_end:
        end_to_end(args, names, texts, sum(seq_lens))
    else:
        per_layer(args, names, hf_config, seq_lens)


if __name__ == "__main__":
    main()
