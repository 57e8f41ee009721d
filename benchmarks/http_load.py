"""``drive``: closed-loop HTTP load on a server: ``concurrency`` clients, each posting its next item as soon
as its previous answer came back (aiohttp, in this process or spread over load-generator processes), with
each request's latency, the errors and the generator's own CPU time (``LoadResult``). The benches that put a
server (wde's, or a peer's) under load share it."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

REQUEST_TIMEOUT_S = 120.0


@dataclass
class LoadResult:
    concurrency: int
    num_requests: int
    seconds: float
    latencies: list[float]
    num_errors: int
    client_cpu_s: float  # CPU time of the load generator's process while it ran

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
    posted to ``path``. aiohttp keeps the generator's own CPU use low (0.2-0.6 ms per request against
    httpx's 2.6 ms here), which matters when it shares the machine with the server."""
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
        start, start_cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client_loop(session) for _ in range(concurrency)))
        seconds, client_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    return LoadResult(concurrency, len(latencies), seconds, latencies, num_errors, client_cpu_s)


def drive_in_processes(
    url: str,
    texts: Sequence[Any],
    concurrency: int,
    num_processes: int,
    path: str = "/embed",
    body: Callable[[Any], dict[str, Any]] = tei_body,
) -> LoadResult:
    """``drive`` with its ``concurrency`` clients spread over ``num_processes`` load-generator processes
    (one event loop each, started together), so that on a many-core machine the generator is not what
    limits the server; ``body`` must be a module-level function (it crosses to the processes)."""
    if num_processes <= 1:
        return asyncio.run(drive(url, texts, concurrency, path, body))
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(num_processes), context.Queue()
    processes = [
        context.Process(
            target=_client_process,
            args=(url, texts[index::num_processes], share, path, body, barrier, results),
        )
        for index, share in enumerate(_shares(concurrency, num_processes))
    ]
    for process in processes:
        process.start()
    parts: list[LoadResult] = [results.get(timeout=REQUEST_TIMEOUT_S * 10) for _ in processes]
    for process in processes:
        process.join()
    return LoadResult(
        concurrency,
        sum(part.num_requests for part in parts),
        max(part.seconds for part in parts),
        [latency for part in parts for latency in part.latencies],
        sum(part.num_errors for part in parts),
        sum(part.client_cpu_s for part in parts),
    )


def _shares(total: int, num_parts: int) -> list[int]:
    return [total // num_parts + (index < total % num_parts) for index in range(num_parts)]


def _client_process(
    url: str,
    texts: Sequence[Any],
    concurrency: int,
    path: str,
    body: Callable[[Any], dict[str, Any]],
    barrier: Any,
    results: Any,
) -> None:
    barrier.wait()
    results.put(asyncio.run(drive(url, texts, concurrency, path, body)))
