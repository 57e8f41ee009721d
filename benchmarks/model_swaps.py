"""Mixed traffic of two models through ``--max-loaded-models 1``: loads, requests/s and latency of requests
naming the two models in turn (a, b, a, b, ...) at a concurrency, against the same server with both loaded.

    python -m benchmarks.model_swaps --requests 200 --concurrency 16

It serves the bundled model (or --model) twice, under two served names (a models.yaml), so that each swap
unloads one engine and loads the other; the loads are read from ``wde_model_loads`` on /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.server_load import STARTUP_TIMEOUT_S, LoadResult, drive
from benchmarks.subprocess_server import free_port, serving

NAMES = ("swap-a", "swap-b")


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
    model: str | None, texts: list[str], concurrency: int, extra_args: list[str]
) -> tuple[LoadResult, int]:
    """(the load result, loads during it) of one ``wde serve`` with ``extra_args``."""
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
        with serving("wde serve", command, f"{url}/health", STARTUP_TIMEOUT_S):
            loads_before = num_loads(url)
            result = asyncio.run(drive(url, items, concurrency, path="/v1/embeddings", body=body))
            # drive's warm-up request (the first item) may itself swap: counted with the run
            return result, num_loads(url) - loads_before


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model folder or hub id (default: the bundled model)")
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--only-swapping", action="store_true", help="skip the both-loaded baseline")
    args = parser.parse_args(argv)
    texts = load_texts(args.data, args.requests)
    runs = [("--max-loaded-models 1", ["--max-loaded-models", "1"])]
    if not args.only_swapping:
        runs.append(("both loaded", []))
    print(f"{args.requests} requests, models {NAMES[0]} / {NAMES[1]} in turn, concurrency {args.concurrency}")
    print("| server | loads | req/s | p50 ms | p95 ms | max ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, extra_args in runs:
        result, loads = run(args.model, texts, args.concurrency, extra_args)
        print(
            f"| {label} | {loads} | {result.requests_per_s:.1f} | {result.percentile_ms(50):.0f} | "
            f"{result.percentile_ms(95):.0f} | {max(result.latencies) * 1000:.0f} | {result.num_errors} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
