"""The engine's host work per text, where the forward is nearly free: a random 1-layer BERT of hidden size 32
with the bundled MiniLM tokenizer (``--model host``), or any model folder / ``minilm`` on a GPU.

    python -m benchmarks.host_overhead                       # CPU, 16,000 docs.jsonl texts
    python -m benchmarks.host_overhead --device cuda --model minilm --dtype float16

Rows, in microseconds per text (and texts/s), all in one run:
- the tokenizer alone: wde's ``Tokenizer.encode_batch`` over every text in one call (rayon's threads);
- ``LLM.encode`` from ``prompt_token_ids`` (no tokenizer) and from text;
- the forward's own share: the executor's time in ``execute_model`` (``BatchStats``), and on CUDA the GPU's
  busy share (kernel time over wall time, from the executor's CUDA events);
- host work beside tokenizer and forward: from-ids wall minus the forward, per text;
- sentence-transformers' ``encode`` (batch 32) on the same texts and device.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.dataset import load_texts, shared_data_path

HOST_SIZE = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--num-texts", type=int, default=16_000, help="the data's texts, cycled to this many")
    parser.add_argument("--model", default="host", help="host (the tiny random BERT), minilm, or a folder")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default=None, help="default: float32 on cpu, float16 on cuda")
    parser.add_argument("--executor", default=None, choices=["sync", "async"])
    parser.add_argument("--tokenizer-workers", type=int, default=None, help="default: the engine's")
    parser.add_argument(
        "--tokenizer-processes",
        type=int,
        default=None,
        help="also from text with this many tokenizer processes (wde --tokenizer-processes) in a second "
        "engine; default: on cuda the usable cores minus one, on cpu none (0: no such row)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per row (the median is kept)")
    parser.add_argument("--no-peer", action="store_true", help="skip sentence-transformers")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    dtype = args.dtype or ("float16" if args.device == "cuda" else "float32")
    texts = cycled(load_texts(args.data), args.num_texts)
    from benchmarks.cpu_info import cpu_model
    from wde.engine_args import default_model_path

    minilm = Path(os.environ.get("WDE_GPU_MODEL") or default_model_path())  # gpu_check sets it
    print(f"# wde host overhead: {len(texts):,} texts of {args.data}")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} cores; device {args.device}, {dtype}")
    print(f"- TOKENIZERS_PARALLELISM={os.environ.get('TOKENIZERS_PARALLELISM', '(unset)')}")
    with tempfile.TemporaryDirectory() as scratch:
        model = model_folder(args.model, minilm, Path(scratch))
        table = Table(len(texts))
        measure(model, texts, args, dtype, table)
    tokenizer_s, from_text = table.seconds.get(TOKENIZER_ROW), table.seconds.get(FROM_TEXT_ROW)
    if tokenizer_s and from_text:
        print(f"\nfrom text / tokenizer alone: {from_text / tokenizer_s:.2f}x")


TOKENIZER_ROW = "tokenizer alone (one call)"
FROM_IDS_ROW = "LLM.encode from token ids"
FROM_TEXT_ROW = "LLM.encode from text"


class Table:
    """The rows, each printed as soon as it is measured: a run stopped at its time limit (``gpu_check``)
    keeps what it measured."""

    def __init__(self, num_texts: int) -> None:
        self.num_texts = num_texts
        self.seconds: dict[str, float] = {}
        print("\n| row | µs per text | texts/s |\n|---|---|---|", flush=True)

    def add(self, name: str, seconds: float | None) -> None:
        if seconds is None:
            return
        self.seconds[name] = seconds
        per_text, per_s = seconds / self.num_texts * 1e6, self.num_texts / seconds
        print(f"| {name} | {per_text:,.1f} | {per_s:,.0f} |", flush=True)

    def add_share(self, name: str, share: float | None) -> None:
        if share is not None:
            print(f"| {name} | {share:.0%} | - |", flush=True)


def cycled(texts: list[str], num_texts: int) -> list[str]:
    return [texts[i % len(texts)] for i in range(num_texts)]


def model_folder(model: str, minilm: Path, scratch: Path) -> Path:
    if model == "minilm":
        return minilm
    if model != "host":
        return Path(model)
    from benchmarks.random_bert import BERT_SIZES, write_random_bert

    BERT_SIZES.setdefault("host", HOST_SIZE)
    return write_random_bert(scratch / "bert-host", "host", minilm)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median of ``repeats`` timed calls, after one untimed warm-up (lazy graphs, allocator, caches)."""
    run()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def measure(model: Path, texts: list[str], args: argparse.Namespace, dtype: str, table: Table) -> None:
    from wde import LLM

    engine_args: dict[str, object] = {"device": args.device, "dtype": dtype}
    if args.executor:
        engine_args["executor"] = args.executor
    if args.tokenizer_workers is not None:
        engine_args["tokenizer_workers"] = args.tokenizer_workers
    llm = LLM(str(model), **engine_args)
    try:
        tokenizer = llm.engine.tokenizer
        inputs: list[Any] = list(texts)
        table.add(TOKENIZER_ROW, median_seconds(lambda: tokenizer.encode_batch(inputs), args.repeats))
        prompts: list[Any] = [
            {"prompt_token_ids": encoding.token_ids} for encoding in tokenizer.encode_batch(inputs)
        ]
        clock = ForwardTime(llm)
        from_ids = median_seconds(lambda: llm.encode(prompts), args.repeats)
        table.add(FROM_IDS_ROW, from_ids)
        forward_s, busy = clock.per_pass(1 + args.repeats)
        table.add("  of which execute_model (forward + pooling + output copy)", forward_s)
        table.add("  host work beside the forward", from_ids - forward_s)
        table.add_share("GPU busy share, from token ids", busy)
        table.add(FROM_TEXT_ROW, median_seconds(lambda: llm.encode(texts), args.repeats))
        table.add_share("GPU busy share, from text", clock.per_pass(1 + args.repeats)[1])
    finally:
        llm.engine.shutdown()
    num_processes = tokenizer_processes(args)
    if num_processes:
        measure_from_text(model, texts, args, {**engine_args, "tokenizer_processes": num_processes}, table)
    if not args.no_peer:
        table.add(
            "sentence-transformers encode (batch 32)",
            sentence_transformers_seconds(model, texts, args, dtype),
        )


def tokenizer_processes(args: argparse.Namespace) -> int:
    if args.tokenizer_processes is not None:
        return args.tokenizer_processes
    from wde.platforms.cores import usable_cores

    return max(1, usable_cores() - 1) if args.device == "cuda" else 0


def measure_from_text(
    model: Path, texts: list[str], args: argparse.Namespace, engine_args: dict[str, object], table: Table
) -> None:
    """From text in a second engine with tokenizer processes (the tokenizer's Python objects off the
    engine's GIL): the row to set against ``FROM_TEXT_ROW``."""
    from wde import LLM

    llm = LLM(str(model), **engine_args)
    try:
        clock = ForwardTime(llm)
        name = f"{FROM_TEXT_ROW}, tokenizer processes: {engine_args['tokenizer_processes']}"
        table.add(name, median_seconds(lambda: llm.encode(texts), args.repeats))
        table.add_share(
            "GPU busy share, from text with tokenizer processes", clock.per_pass(1 + args.repeats)[1]
        )
    finally:
        llm.engine.shutdown()


class ForwardTime:
    """Sums the executor's forward seconds (``BatchStats.execute_seconds``) over each ``LLM.encode`` pass,
    and the GPU busy share the runner's CUDA events measured (None on CPU)."""

    def __init__(self, llm: object) -> None:
        self.engine = llm.engine  # type: ignore[attr-defined]
        self.seconds = 0.0
        step = self.engine.step

        def timed_step():
            outputs = step()
            for batch in self.engine.last_step_stats.finished_batches:
                self.seconds += batch.execute_seconds
            return outputs

        self.engine.step = timed_step
        self._mark()

    def _mark(self) -> None:
        self.seconds = 0.0
        self.busy = getattr(self.engine.runner, "busy_clock", None)
        if self.busy is not None:
            self.busy.reset()

    def per_pass(self, num_passes: int) -> tuple[float, float | None]:
        """Forward seconds per pass since the last call (warm-up included), and the GPU busy share."""
        seconds = self.seconds / num_passes
        busy = self.busy.share() if self.busy is not None else None
        self._mark()
        return seconds, busy


def sentence_transformers_seconds(
    model: Path, texts: list[str], args: argparse.Namespace, dtype: str
) -> float | None:
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("- sentence-transformers is not installed: its row is skipped", file=sys.stderr)
        return None
    st = SentenceTransformer(str(model), device=args.device)
    if dtype != "float32":
        st = st.to(getattr(torch, dtype))
    return median_seconds(lambda: st.encode(texts, batch_size=32), args.repeats)


if __name__ == "__main__":
    main()
