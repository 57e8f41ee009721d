"""What the result cache saves on a corpus that repeats itself: ``python -m benchmarks.result_cache``.

The texts of ``--data`` (default ``../shared/data/docs.jsonl``) with duplicates injected: a share of the rows
(``--duplicate-share``, a third by default) repeats another row, shuffled with a fixed seed, so repeats fall
both inside one client batch and across batches. ``LLM.encode`` runs the corpus in client-sized batches
(``--batch-size``), once without the cache and once with ``--cache-size`` MiB, one run each: wall time,
rows/s and tokens/s served (repeats included), the forward passes and tokens the model really ran, the
cache's hits and in-batch duplicates; and the largest difference between the two runs' embeddings.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from wde import LLM

WARMUP_TEXTS = [f"a warm-up sentence number {index} about nothing in the corpus" for index in range(64)]


@dataclass
class Run:
    cache_size: float
    seconds: float
    num_rows: int
    num_tokens_served: int
    num_forward_passes: int
    num_tokens_run: int
    embeddings: np.ndarray
    stats: Any


def with_duplicates(texts: Sequence[str], share: float, seed: int) -> list[str]:
    """``texts`` plus repeats of randomly chosen rows, so that ``share`` of the result's rows are repeats;
    shuffled."""
    rng = random.Random(seed)
    num_repeats = round(len(texts) * share / (1 - share))
    corpus = [*texts, *(rng.choice(texts) for _ in range(num_repeats))]
    rng.shuffle(corpus)
    return corpus


def run(corpus: Sequence[str], cache_size: float, batch_size: int) -> Run:
    llm = LLM(cache_size=cache_size)
    llm.encode(WARMUP_TEXTS)  # texts outside the corpus: nothing of it is cached before timing
    passes: list[int] = []
    forward = llm.engine.runner.execute_model

    def counted(batch: Any) -> Any:
        passes.append(int(batch.num_tokens))
        return forward(batch)

    llm.engine.runner.execute_model = counted
    start = time.perf_counter()
    outputs = []
    for first in range(0, len(corpus), batch_size):
        outputs.extend(llm.encode(corpus[first : first + batch_size]))
    seconds = time.perf_counter() - start
    stats = None if llm.result_reuse is None else llm.result_reuse.stats()
    result = Run(
        cache_size,
        seconds,
        len(outputs),
        sum(output.num_tokens for output in outputs),
        len(passes),
        sum(passes),
        np.stack([output.embedding for output in outputs]),
        stats,
    )
    del llm
    gc.collect()
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.result_cache", description=__doc__)
    parser.add_argument("--data", default=shared_data_path("docs.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="use only the first N texts")
    parser.add_argument("--duplicate-share", type=float, default=1 / 3, help="share of rows that repeat")
    parser.add_argument(
        "--batch-size", type=int, default=256, help="texts per LLM.encode call (a client batch)"
    )
    parser.add_argument("--cache-size", type=float, default=64.0, help="MiB for the cached run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    texts = load_texts(args.data, args.limit)
    corpus = with_duplicates(texts, args.duplicate_share, args.seed)
    print(f"{cpu_model()} ({os.cpu_count()} cores; {' '.join(isa_flags(cpu_flags()))})")
    print(
        f"{args.data}: {len(texts)} texts + {len(corpus) - len(texts)} repeats = {len(corpus)} rows "
        f"({len(set(corpus))} distinct), LLM.encode in batches of {args.batch_size}"
    )
    runs = [run(corpus, 0, args.batch_size), run(corpus, args.cache_size, args.batch_size)]
    print(
        "| cache | wall s | rows/s | tokens/s served | forward passes | tokens run | hits | in-batch dups |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for item in runs:
        hits = "-" if item.stats is None else item.stats.num_hits
        dups = "-" if item.stats is None else item.stats.num_deduplicated
        label = "off" if not item.cache_size else f"{item.cache_size:g} MiB"
        print(
            f"| {label} | {item.seconds:.2f} | {item.num_rows / item.seconds:.1f} | "
            f"{item.num_tokens_served / item.seconds:.0f} | {item.num_forward_passes} | "
            f"{item.num_tokens_run} | {hits} | {dups} |"
        )
    off, on = runs
    print(
        f"speed-up {off.seconds / on.seconds:.2f}x; cache held {on.stats.num_bytes / 2**20:.1f} MiB in "
        f"{on.stats.num_entries} entries; max |difference| of the embeddings "
        f"{float(np.abs(off.embeddings - on.embeddings).max()):.2e}"
    )


if __name__ == "__main__":
    main()
