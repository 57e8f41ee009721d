"""Load on the HTTP server: requests/s and p50/p95/p99 latency at given concurrencies, one text per
``POST /embed`` (how TEI clients call), next to in-process ``LLM.encode`` throughput on the same texts.

    python -m benchmarks.server_load --data ../shared/data/queries.jsonl --concurrency 1 32
    python -m benchmarks.server_load --words 10 --concurrency 1 --peer infinity  # one 10-word query at a time
    python -m benchmarks.server_load --concurrency 64 --api-workers 1 2   # a server per --api-workers value
    python -m benchmarks.server_load --model host --api-workers 1 2       # the tiny model: HTTP dominates
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
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks import peers
from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import LoadResult, drive, drive_in_processes, tei_body
from benchmarks.subprocess_server import free_port, serving

STARTUP_TIMEOUT_S = 180.0
WARMUP_REQUESTS = 64


@contextmanager
def served(model: str | None, dtype: str, extra_args: list[str]) -> Iterator[str]:
    """``wde serve`` in a subprocess until the block ends; yields its URL once /health answers 200."""
    with served_process(model, dtype, extra_args) as (url, _pid):
        yield url


@contextmanager
def served_process(model: str | None, dtype: str, extra_args: list[str]) -> Iterator[tuple[str, int]]:
    """``served``, yielding (URL, the server's pid) for reading its processes' CPU time."""
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", *([model] if model else [])]
    command += ["--port", str(port), "--dtype", dtype, "--max-concurrent-requests", "4096", *extra_args]
    url = f"http://127.0.0.1:{port}"
    with serving("wde serve", command, f"{url}/health", STARTUP_TIMEOUT_S) as process:
        yield url, process.pid


def in_process_texts_per_s(
    model: str | None, dtype: str, texts: list[str], quantization: str | None = None
) -> tuple[float, float]:
    """(texts/s, tokens/s) of LLM.encode on all texts at once, after a warm-up."""
    from wde import LLM

    llm = LLM(model, dtype=dtype, quantization=quantization)
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
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"))
    parser.add_argument("--limit", type=int, default=2000, help="texts sent per concurrency level")
    parser.add_argument(
        "--words", type=int, default=None, help="only the texts of exactly this many words (e.g. 10)"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--server", default=None, help="URL of a running server (default: start wde serve)")
    parser.add_argument(
        "--model",
        default=None,
        help="local HF directory, or host: a random 1-layer hidden-32 BERT with MiniLM's tokenizer (the "
        "forward nearly free: what HTTP costs shows); default: the bundled all-MiniLM-L6-v2",
    )
    parser.add_argument(
        "--api-workers",
        type=int,
        nargs="+",
        default=[1],
        help="wde serve --api-workers: a server for each value, its rows in the same table",
    )
    parser.add_argument(
        "--client-processes", type=int, default=1, help="load-generator processes (one event loop each)"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--quantization",
        default="none",
        choices=["none", "int8"],
        help="in process and served alike (wde serve --quantization int8)",
    )
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="extra `wde serve` flag (repeatable)"
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        choices=["infinity"],
        help="also load Infinity's server (`make peer-infinity`) with the same texts, one per request",
    )
    args = parser.parse_args(argv)
    if missing_peers := peers.missing(args.peer):
        parser.error("\n".join(missing_peers))
    texts = texts_with_words(load_texts(args.data), args.words)[: args.limit]
    if not texts:
        parser.error(f"{args.data} has no text of exactly {args.words} words")

    quantization = None if args.quantization == "none" else args.quantization
    serve_args = [*args.serve_arg, *(["--quantization", quantization] if quantization else [])]
    with tempfile.TemporaryDirectory() as scratch:
        model = bench_model(args.model, Path(scratch))
        # 1. in process, alone on the machine
        texts_per_s, tokens_per_s = (
            (None, None) if args.server else in_process_texts_per_s(model, args.dtype, texts, quantization)
        )
        # 2. over HTTP: wde (a server per --api-workers value), then each peer, with the same texts and load
        results: list[tuple[str, LoadResult]] = []
        for num_workers in [None] if args.server else args.api_workers:
            name = "wde POST /embed" + (f", {num_workers} API workers" if num_workers else "")
            worker_args = ["--api-workers", str(num_workers)] if num_workers else []
            server = (
                served(model, args.dtype, [*serve_args, *worker_args]) if num_workers else _given(args.server)
            )
            with server as url:
                levels = load_levels(url, texts, args.concurrency, num_processes=args.client_processes)
                results += [(name, result) for result in levels]
    if "infinity" in args.peer:
        from wde.engine_args import default_model_path

        model = args.model or default_model_path()
        with peers.infinity_server(model, args.dtype) as url:
            infinity = load_levels(url, texts, args.concurrency, "/embeddings", peers.infinity_body)
        results += [("Infinity POST /embeddings", result) for result in infinity]
    # 3. report
    words = f" of {args.words} words" if args.words else ""
    print(
        f"# {len(texts)} texts{words} from {args.data}, one text per request, dtype {args.dtype}, "
        f"quantization {args.quantization}, "
        f"{os.cpu_count()} CPUs shared by server and load generator ({args.client_processes} process(es)); "
        f"model {args.model or 'bundled all-MiniLM-L6-v2'}; CPU {cpu_model()}, ISA flags "
        f"{' '.join(isa_flags(cpu_flags()))}"
    )
    if texts_per_s is not None:
        print(f"in-process LLM.encode: {texts_per_s:,.1f} texts/s ({tokens_per_s:,.0f} tokens/s)")
    print(
        "| server | concurrency | requests/s | p50 ms | p95 ms | p99 ms | errors | vs in-process "
        "| load generator CPU ms/request |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, result in results:
        ratio = f"{result.requests_per_s / texts_per_s:.0%}" if texts_per_s else "n/a"
        print(
            f"| {name} | {result.concurrency} | {result.requests_per_s:,.1f} | "
            f"{result.percentile_ms(50):.1f} | {result.percentile_ms(95):.1f} | "
            f"{result.percentile_ms(99):.1f} | {result.num_errors} | "
            f"{ratio} | {result.client_cpu_s / result.num_requests * 1000:.2f} |"
        )


def texts_with_words(texts: list[str], num_words: int | None) -> list[str]:
    return texts if num_words is None else [text for text in texts if len(text.split()) == num_words]


def load_levels(
    url: str,
    texts: Sequence[Any],
    concurrencies: Sequence[int],
    path: str = "/embed",
    body: Callable[[Any], dict[str, Any]] = tei_body,
    num_processes: int = 1,
) -> list[LoadResult]:
    """One untimed warm-up pass over the first texts, then every concurrency level over all texts (the
    load from ``num_processes`` generator processes)."""
    asyncio.run(drive(url, texts[:WARMUP_REQUESTS], max(concurrencies), path, body))
    return [
        drive_in_processes(url, texts, concurrency, num_processes, path, body)
        for concurrency in concurrencies
    ]


def bench_model(model: str | None, scratch: Path) -> str | None:
    """``host``: the tiny random BERT written into ``scratch``; anything else as given."""
    if model != "host":
        return model
    from benchmarks.host_overhead import model_folder
    from wde.engine_args import default_model_path

    return str(model_folder("host", Path(default_model_path()), scratch))


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url.rstrip("/")


if __name__ == "__main__":
    main()
