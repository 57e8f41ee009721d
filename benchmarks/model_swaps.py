"""Mixed traffic of two models through ``--max-loaded-models 1``: loads, requests/s and latency of requests
naming the two models in turn (a, b, a, b, ...) at a concurrency, against the same server with both loaded.

    python -m benchmarks.model_swaps --requests 200 --concurrency 16

It serves the bundled model (or --model) twice, under two served names (a models.yaml), so that each swap
unloads one engine and loads the other; the loads are read from ``wde_model_loads`` on /metrics. The
longest wait allowed (``SwapTiming.max_wait_bound``, ``server/served_models/swap_policy.py``) is worked out
from the server's own log of the run: its longest load, unload, and drain of the requests in flight on the
model that yielded. A request's latency is its wait plus its own forward pass and HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import LoadResult, drive
from benchmarks.server_load import STARTUP_TIMEOUT_S
from benchmarks.subprocess_server import free_port, serving
from server.served_models.swap_policy import SwapTiming

NAMES = ("swap-a", "swap-b")
# the registry's log lines (server/served_models/model_registry.py)
LOADED = re.compile(r"wde\.server: loaded \S+ in ([0-9.]+) s")
UNLOADED = re.compile(
    r"wde\.server: unloaded \S+ \((\w+)[^)]*\) to load \S+ in ([0-9.]+) s: "
    r"its \d+ requests in flight finished in ([0-9.]+) s"
)


@dataclass
class SwapLog:
    """The longest load, unload (engine stopped) and drain of the requests in flight, from the server log."""

    max_load_s: float = 0.0
    max_unload_s: float = 0.0
    max_drain_s: float = 0.0
    num_drained: int = 0  # swaps made because the loaded model drained
    num_waited: int = 0  # swaps forced by --max-swap-wait

    @classmethod
    def parse(cls, text: str) -> SwapLog:
        log = cls()
        for match in LOADED.finditer(text):
            log.max_load_s = max(log.max_load_s, float(match[1]))
        for match in UNLOADED.finditer(text):
            total, drain = float(match[2]), float(match[3])
            log.max_drain_s = max(log.max_drain_s, drain)
            log.max_unload_s = max(log.max_unload_s, total - drain)
            log.num_drained += match[1] == "drained"
            log.num_waited += match[1] == "waited"
        return log

    def bound_s(self, timing: SwapTiming) -> float:
        return timing.max_wait_bound(self.max_load_s, self.max_load_s, self.max_drain_s, self.max_unload_s)


def models_file(folder: Path, model: str | None) -> Path:
    from wde.engine_args import default_model_path

    path = folder / "models.yaml"
    model_path = model or default_model_path()
    path.write_text(
        "models:\n" + "".join(f"  - model: {model_path}\n    served_model_name: {name}\n" for name in NAMES)
    )
    return path


def num_loads(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name == "wde_model_loads":
            return int(sum(sample.value for sample in family.samples if sample.name.endswith("_total")))
    raise RuntimeError("no wde_model_loads metric on /metrics")


def run(
    model: str | None,
    texts: list[str],
    concurrency: int,
    extra_args: list[str],
    keep_log: Path | None = None,
) -> tuple[LoadResult, int, SwapLog]:
    """(the load result, loads during it, the swaps' times) of one ``wde serve`` with ``extra_args``."""
    items = [(NAMES[index % 2], text) for index, text in enumerate(texts)]

    def body(item: tuple[str, str]) -> dict[str, Any]:
        return {"model": item[0], "input": item[1]}

    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--model-config",
            str(models_file(Path(folder), model)),
        ]
        command += ["--port", str(port), "--no-access-log", "--max-concurrent-requests", "4096", *extra_args]
        url = f"http://127.0.0.1:{port}"
        log_path = Path(folder) / "serve.log"
        with serving("wde serve", command, f"{url}/health", STARTUP_TIMEOUT_S, log_path=log_path):
            loads_before = num_loads(url)
            result = asyncio.run(drive(url, items, concurrency, path="/v1/embeddings", body=body))
            # drive's warm-up request (the first item) may itself swap: counted with the run
            loads = num_loads(url) - loads_before
        text = log_path.read_text()
        if keep_log is not None:
            keep_log.write_text(text)
        return result, loads, SwapLog.parse(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model folder or hub id (default: the bundled model)")
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only-swapping", action="store_true", help="skip the both-loaded baseline")
    parser.add_argument("--max-swap-wait", type=float, default=SwapTiming.max_wait)
    parser.add_argument("--min-model-residency", type=float, default=SwapTiming.min_residency)
    parser.add_argument("--keep-log", type=Path, default=None, help="write the swapping server's log here")
    parser.add_argument(
        "--api-workers", type=int, default=1, help="the servers' --api-workers (2+: the engine process swaps)"
    )
    args = parser.parse_args(argv)
    texts = load_texts(args.data, args.requests)
    timing = SwapTiming(args.max_swap_wait, args.min_model_residency)
    swap_flags = ["--max-swap-wait", str(timing.max_wait), "--min-model-residency", str(timing.min_residency)]
    workers = ["--api-workers", str(args.api_workers)]
    runs = [("--max-loaded-models 1", ["--max-loaded-models", "1", *swap_flags, *workers])]
    if not args.only_swapping:
        runs.append(("both loaded", workers))
    print(
        f"{args.requests} requests, models {NAMES[0]} / {NAMES[1]} in turn, concurrency {args.concurrency}, "
        f"--api-workers {args.api_workers}"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| server | loads (drained / waited) | req/s | p50 ms | p95 ms | max ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    swap_logs = []
    for label, extra_args in runs:
        keep_log = args.keep_log if "--max-loaded-models" in extra_args else None
        result, loads, swap_log = run(args.model, texts, args.concurrency, extra_args, keep_log)
        if loads:
            swap_logs.append(swap_log)
        print(
            f"| {label} | {loads} ({swap_log.num_drained} / {swap_log.num_waited}) | "
            f"{result.requests_per_s:.1f} | {result.percentile_ms(50):.0f} | "
            f"{result.percentile_ms(95):.0f} | {max(result.latencies) * 1000:.0f} | {result.num_errors} |",
            flush=True,
        )
    for swap_log in swap_logs:
        print(
            f"longest load {swap_log.max_load_s:.2f} s, unload {swap_log.max_unload_s:.2f} s, drain "
            f"{swap_log.max_drain_s:.2f} s: wait bound {swap_log.bound_s(timing):.2f} s (bounded wait plus "
            f"one load: {timing.max_wait + swap_log.max_load_s:.2f} s); load average after: "
            f"{os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
