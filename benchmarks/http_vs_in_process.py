"""Short queries over HTTP against the same texts in process, in paired slices (issue 26: >= 80%).

    python -m benchmarks.http_vs_in_process                 # 20 pairs of 500 one-text requests
    python -m benchmarks.http_vs_in_process --pairs 30 --baseline-ref 8924ae3

One ``wde serve`` (bundled all-MiniLM-L6-v2, float32) and an ``LLM`` in this process, both loaded the
whole run. Each pair runs one slice of texts (``--slice`` of ../shared/data/queries.jsonl) both ways:
``LLM.encode`` of the slice at once (texts/s), and one text per request at ``--concurrency`` 32 through
the server (requests/s, the load generator of ``benchmarks/http_load.py``); the pair's ratio is HTTP /
in process. The two halves of a pair run back to back, in alternating order (ABBA), so the machine's
drift (20-30% over minutes on the shared 2-core machines) cancels within a pair instead of landing between
two long runs; the median and quartiles of the pairs' ratios are printed. ``--baseline-ref`` serves a git
worktree of that ref too: each pair then runs three ways (in process, that tree, the current one);
``--serve-args '...'`` serves the current tree once more with those flags.

The load generator shares the machine with the server (on 2 cores its CPU competes with the server's),
as it does with every figure of the issue. The Python one (aiohttp) spends ~0.2 CPU-ms per request, and on
a closed loop its answer-to-next-request work sits between two forward passes. ``--wrk`` adds, in every
pair, the same slice sent by wrk (C, one thread, 32 connections; ``apt install wrk``): the server's share
alone, as with clients on other machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import drive
from benchmarks.request_cost import REPO_ROOT, baseline_tree, load_average, started

# wrk's request generator: the slice's bodies in turn, one text per POST /embed (WRK_BODIES: one per line);
# at the end it prints the mean latency (microseconds) and the failures
WRK_SCRIPT = """
local bodies = {}
for line in io.lines(os.getenv("WRK_BODIES")) do bodies[#bodies + 1] = line end
local next_body = 0
request = function()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", "/embed", {["Content-Type"] = "application/json"}, bodies[next_body])
end
done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format("wde-mean-latency-us %.3f\\n", latency.mean))
  io.write(string.format("wde-failures %d\\n", errors.connect + errors.read + errors.write + errors.status
    + errors.timeout))
end
"""
WRK_SECONDS = 3
WRK_MEAN_LATENCY = re.compile(r"^wde-mean-latency-us (\S+)$", re.MULTILINE)
WRK_FAILURES = re.compile(r"^wde-failures (\d+)$", re.MULTILINE)


def wrk_requests_per_s(url: str, piece: list[str], concurrency: int, folder: Path) -> float:
    """wrk sending ``piece`` in turn for WRK_SECONDS seconds, every answer a 2xx. Requests/s by Little's
    law, ``concurrency`` / the mean latency: wrk's own "Requests/sec" divides the answered requests by the
    whole run, and the requests in flight when it stops (up to a whole batch: ~4% of a 2 s run here) are
    dropped; the latencies of the answered ones carry no such edge (wrk sends again at once, so a
    connection's cycle is its latency)."""
    bodies, script = folder / "bodies.txt", folder / "bodies.lua"
    bodies.write_text("".join(json.dumps({"inputs": text}) + "\n" for text in piece), encoding="utf-8")
    script.write_text(WRK_SCRIPT, encoding="utf-8")
    command = ["wrk", "-t1", f"-c{concurrency}", f"-d{WRK_SECONDS}s", "-s", str(script), url]
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, env={**os.environ, "WRK_BODIES": str(bodies)}
    ).stdout
    latency, failures = WRK_MEAN_LATENCY.search(out), WRK_FAILURES.search(out)
    if latency is None or failures is None:
        raise RuntimeError(f"wrk did not print what its script writes:\n{out}")
    if int(failures.group(1)):
        raise RuntimeError(f"wrk saw failed requests:\n{out}")
    return concurrency / (float(latency.group(1)) / 1e6)


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
    parser.add_argument(
        "--serve-args",
        action="append",
        default=[],
        help="serve the current tree once more with these `wde serve` flags (e.g. '--max-batch-wait-ms 0'); "
        "repeatable",
    )
    parser.add_argument(
        "--wrk",
        action="store_true",
        help="also send each slice to the current tree (each of its servers) with wrk (C load generator)",
    )
    args = parser.parse_args(argv)
    if args.wrk and shutil.which("wrk") is None:
        parser.error("--wrk needs wrk on PATH (apt install wrk)")
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
        trees: list[tuple[str, Path, list[str]]] = [("current", REPO_ROOT, [])]
        if args.baseline_ref:
            root = stack.enter_context(baseline_tree(args.baseline_ref))
            trees.insert(0, (args.baseline_ref, root, []))
        trees += [(f"current {flags}", REPO_ROOT, flags.split()) for flags in args.serve_args]
        urls = {tree: stack.enter_context(started(tree, root, flags)).url for tree, root, flags in trees}
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wde-wrk-")))
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
            ways: list[tuple[str, str | None]] = [("in process", None), *urls.items()]
            if args.wrk:
                ways += [(f"{tree}, wrk", url) for tree, url in urls.items() if tree.startswith("current")]
            rates: dict[str, float] = {}
            for name, target in ways if pair % 2 == 0 else reversed(ways):
                if target is None:
                    rates[name] = in_process(piece)
                elif name.endswith(", wrk"):
                    rates[name] = wrk_requests_per_s(target, piece, args.concurrency, folder)
                else:
                    result = asyncio.run(drive(target, piece, args.concurrency, "/embed", body))
                    rates[name] = result.requests_per_s
            for name, _ in ways[1:]:
                ratios.setdefault(name, []).append(rates[name] / rates["in process"])
            shown = ", ".join(f"{name} {rate:,.1f}/s" for name, rate in rates.items())
            print(f"  pair {pair + 1}: {shown}", file=sys.stderr, flush=True)
    # 3. report
    print(f"# load average at end: {load_average()}")
    print(
        f"# {args.pairs} pairs of {args.slice} texts from {args.data}: LLM.encode of the slice vs one text "
        f"per /embed request at concurrency {args.concurrency}, float32, back to back in alternating order"
    )
    print("| tree (load generator aiohttp, unless named) | HTTP / in process: median | quartiles | >= 80% |")
    print("|---|---|---|---|")
    for tree, values in ratios.items():
        low, median, high = quartiles(values)
        over = sum(value >= 0.8 for value in values)
        print(f"| {tree} | **{median:.0%}** | {low:.0%} - {high:.0%} | {over} of {len(values)} |")


if __name__ == "__main__":
    main()
