"""Load on the HTTP server: requests/s and p50/p95/p99 latency at given concurrencies, one text per
``POST /embed`` (how TEI clients call), next to in-process ``LLM.encode`` throughput on the same texts.

    python -m wde.bench.server_load --data ../shared/data/queries.jsonl --concurrency 1 32
    wde bench --server http://127.0.0.1:8000 --concurrency 32   # a running server

Without ``--server`` it starts ``wde serve`` on a free 127.0.0.1 port with the same model and dtype, and
stops it (SIGTERM) at the end. The load generator shares the machine with the server: on a small machine
its own CPU use is part of what the figures show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from wde.bench.dataset import load_texts
from wde.bench.subprocess_server import free_port, serving

STARTUP_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 120.0


@dataclass
class LoadResult:
    concurrency: int
    num_requests: int
    seconds: float
    latencies: list[float]
    num_errors: int

    @property
    def requests_per_s(self) -> float:
        return self.num_requests / self.seconds

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) * 1000


def tei_body(text: str) -> dict[str, Any]:
    return {"inputs": text}


async def drive(
    url: str,
    texts: Sequence[Any],
    concurrency: int,
    path: str = "/embed",
    body: Callable[[Any], dict[str, Any]] = tei_body,
) -> LoadResult:
    """``concurrency`` clients, each sending the next text as soon as its previous answer came back.
    ``body`` turns an item of ``texts`` (a text, or a list of texts for batched requests) into the JSON
    posted to ``path``. aiohttp keeps the generator's own CPU use low (about a third of httpx's per
    request), which matters when it shares the machine with the server."""
    import aiohttp

    pending = iter(texts)
    latencies: list[float] = []
    num_errors = 0

    async def post(session: aiohttp.ClientSession, item: Any) -> int:
        async with session.post(path, json=body(item)) as response:
            await response.read()
            return response.status

    async def client_loop(session: aiohttp.ClientSession) -> None:
        nonlocal num_errors
        for item in pending:
            start = time.perf_counter()
            status = await post(session, item)
            latencies.append(time.perf_counter() - start)
            num_errors += status != 200

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as session:
        await post(session, texts[0])  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(session) for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return LoadResult(concurrency, len(latencies), seconds, latencies, num_errors)


@contextmanager
def served(model: str | None, dtype: str, extra_args: list[str]) -> Iterator[str]:
    """``wde serve`` in a subprocess until the block ends; yields its URL once /health answers 200."""
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", *([model] if model else [])]
    command += ["--port", str(port), "--dtype", dtype, "--max-concurrent-requests", "4096", *extra_args]
    url = f"http://127.0.0.1:{port}"
    with serving("wde serve", command, f"{url}/health", STARTUP_TIMEOUT_S):
        yield url


def in_process_texts_per_s(model: str | None, dtype: str, texts: list[str]) -> tuple[float, float]:
    """(texts/s, tokens/s) of LLM.encode on all texts at once, after a warm-up."""
    from wde import LLM

    llm = LLM(model, dtype=dtype)
    llm.encode(texts[:32])
    start = time.perf_counter()
    outputs = llm.encode(texts)
    seconds = time.perf_counter() - start
    llm.engine.shutdown()
    return len(texts) / seconds, sum(output.num_tokens for output in outputs) / seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="../shared/data/queries.jsonl")
    parser.add_argument("--limit", type=int, default=2000, help="texts sent per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--server", default=None, help="URL of a running server (default: start wde serve)")
    parser.add_argument(
        "--model", default=None, help="local HF directory (default: bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="extra `wde serve` flag (repeatable)"
    )
    args = parser.parse_args(argv)
    texts = load_texts(args.data, args.limit)

    # 1. in process, alone on the machine
    texts_per_s, tokens_per_s = (
        (None, None) if args.server else in_process_texts_per_s(args.model, args.dtype, texts)
    )
    # 2. over HTTP
    results = []
    server = served(args.model, args.dtype, args.serve_arg) if args.server is None else _given(args.server)
    with server as url:
        for concurrency in args.concurrency:
            results.append(asyncio.run(drive(url, texts, concurrency)))
    # 3. report
    print(
        f"# {len(texts)} texts from {args.data}, one text per POST /embed, dtype {args.dtype}, "
        f"{os.cpu_count()} CPUs shared by server and load generator"
    )
    if texts_per_s is not None:
        print(f"in-process LLM.encode: {texts_per_s:,.1f} texts/s ({tokens_per_s:,.0f} tokens/s)")
    print("| concurrency | requests/s | p50 ms | p95 ms | p99 ms | errors | vs in-process |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        ratio = f"{result.requests_per_s / texts_per_s:.0%}" if texts_per_s else "n/a"
        print(
            f"| {result.concurrency} | {result.requests_per_s:,.1f} | {result.percentile_ms(50):.1f} | "
            f"{result.percentile_ms(95):.1f} | {result.percentile_ms(99):.1f} | {result.num_errors} | "
            f"{ratio} |"
        )


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url.rstrip("/")


if __name__ == "__main__":
    main()
