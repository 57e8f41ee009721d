"""Short queries over HTTP against the same texts in process, in paired slices (issue 26: >= 80%).

    python -m benchmarks.http_vs_in_process                 # 20 pairs of 500 one-text requests
    python -m benchmarks.http_vs_in_process --pairs 30 --baseline-ref 8924ae3

One ``wde serve`` (bundled all-MiniLM-L6-v2, float32) and an ``LLM`` in this process, both loaded the
whole run. Each pair runs one slice of texts (``--slice`` of ../shared/data/queries.jsonl) both ways:
``LLM.encode`` of the slice at once (texts/s), and one text per request at ``--concurrency`` 32 through
the server (requests/s, the load generator of ``benchmarks/server_load.py``); the pair's ratio is HTTP /
in process. The two halves of a pair run back to back, in alternating order (ABBA), so the machine's
drift (20-30% over minutes on the shared 2-core machines) cancels within a pair instead of landing between
two long runs; the median and quartiles of the pairs' ratios are printed. ``--baseline-ref`` serves a git
worktree of that ref too: each pair then runs three ways (in process, that tree, the current one).

The load generator shares the machine with the server (on 2 cores its CPU competes with the server's),
as it does with every figure of the issue.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.request_cost import REPO_ROOT, baseline_tree, load_average, started
from benchmarks.server_load import drive


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4)
    return low, median, high


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--pairs", type=int, default=20, help="slices, each run in process and over HTTP")
    parser.add_argument("--slice", type=int, default=500, help="texts per slice")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--baseline-ref", default=None, help="git ref served beside the current tree")
    args = parser.parse_args(argv)
    if not Path(args.data).exists():
        print(f"skipped: {args.data} is missing (short queries, one JSON object with 'text' per line)")
        return
    texts = load_texts(args.data)
    from wde import LLM

    print(f"# CPU: {cpu_model()}; ISA flags: {' '.join(isa_flags(cpu_flags()))}; {os.cpu_count()} CPUs")
    print(f"# load average at start: {load_average()}")
    llm = LLM(None, dtype="float32")
    body = lambda text: {"inputs": text}  # noqa: E731
    ratios: dict[str, list[float]] = {}
    with ExitStack() as stack:
        # 1. the servers (the baseline's first), and everything warmed up
        trees = [("current", REPO_ROOT)]
        if args.baseline_ref:
            trees.insert(0, (args.baseline_ref, stack.enter_context(baseline_tree(args.baseline_ref))))
        urls = {tree: stack.enter_context(started(tree, root, [])).url for tree, root in trees}
        llm.encode(texts[: args.slice])
        for url in urls.values():
            asyncio.run(drive(url, texts[: args.slice], args.concurrency, "/embed", body))

        # 2. the pairs: one slice each, the ways in alternating order
        def in_process(piece: list[str]) -> float:
            start = time.perf_counter()
            llm.encode(piece)
            return len(piece) / (time.perf_counter() - start)

        for pair in range(args.pairs):
            start = (pair * args.slice) % max(1, len(texts) - args.slice)
            piece = texts[start : start + args.slice]
            ways = [("in process", None), *urls.items()]
            rates: dict[str, float] = {}
            for name, url in ways if pair % 2 == 0 else reversed(ways):
                if url is None:
                    rates[name] = in_process(piece)
                else:
                    result = asyncio.run(drive(url, piece, args.concurrency, "/embed", body))
                    rates[name] = result.requests_per_s
            for tree in urls:
                ratios.setdefault(tree, []).append(rates[tree] / rates["in process"])
            shown = ", ".join(f"{name} {rate:,.1f}/s" for name, rate in rates.items())
            print(f"  pair {pair + 1}: {shown}", file=sys.stderr, flush=True)
    # 3. report
    print(f"# load average at end: {load_average()}")
    print(
        f"# {args.pairs} pairs of {args.slice} texts from {args.data}: LLM.encode of the slice vs one text "
        f"per /embed request at concurrency {args.concurrency}, float32, back to back in alternating order"
    )
    print("| tree | HTTP / in process: median | quartiles | pairs >= 80% |")
    print("|---|---|---|---|")
    for tree, values in ratios.items():
        low, median, high = quartiles(values)
        over = sum(value >= 0.8 for value in values)
        print(f"| {tree} | **{median:.0%}** | {low:.0%} - {high:.0%} | {over} of {len(values)} |")


if __name__ == "__main__":
    main()
