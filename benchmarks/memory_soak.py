"""The server's memory under a steady load: ``wde serve`` with the bundled model, its RSS read from
/proc every 1,000 requests.

1. **Soak**: ``--requests`` (default 30,000) one-text ``POST /embed`` requests, ``--concurrency`` (16)
   clients in a closed loop; RSS every 1,000 requests and its growth from the 5,000th request to the end.
2. **Mixed round**: ``/embed`` of 1 and of 32 texts, ``/v1/embeddings`` of 1 text and ``/rerank`` of a
   query against 20 documents, first in a closed loop to measure the capacity (requests/s), then open
   loop at ``--overload`` (2) times it for ``--mixed-seconds`` (60) against a server started with
   ``--max-concurrent-requests 8`` (the excess is refused, as it should be); RSS each second, and the end
   against ``1.5 x idle + 200 MiB`` (idle: after the model loaded, before any request).

    python -m benchmarks.memory_soak --data ../shared/data/queries.jsonl       # make bench-memory
    python -m benchmarks.memory_soak --env WDE_ROW_BUCKETS=0                   # the server without buckets

Each server starts fresh; ``--env NAME=VALUE`` goes into its environment (compare two settings in two runs
on one machine). The load generator shares the machine with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.cpu_info import cpu_flags, cpu_model, isa_flags
from benchmarks.dataset import load_texts, shared_data_path
from benchmarks.http_load import drive
from benchmarks.subprocess_server import free_port, serving

STARTUP_TIMEOUT_S = 180.0
SAMPLE_EVERY = 1_000  # requests between two RSS readings in the soak
GROWTH_FROM = 5_000  # the soak's growth is counted from this request on (after the start-up's own growth)
NUM_RERANK_DOCUMENTS = 20
MIXED_MAX_CONCURRENT = 8


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@contextmanager
def wde_server(env: dict[str, str], extra_args: list[str]) -> Iterator[tuple[str, int]]:
    """``wde serve`` with the bundled model; yields (URL, pid) once healthy."""
    port = free_port()
    command = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]  # default flags
    url = f"http://127.0.0.1:{port}"
    with serving("wde serve", command + extra_args, f"{url}/health", STARTUP_TIMEOUT_S, env) as process:
        yield url, process.pid


# ---- 1. the soak --------------------------------------------------------------------------------------
def soak(texts: list[str], num_requests: int, concurrency: int, env: dict[str, str]) -> list[str]:
    lines = [f"## Soak: {num_requests:,} one-text POST /embed, concurrency {concurrency}", ""]
    with wde_server(env, ["--max-concurrent-requests", "4096"]) as (url, pid):
        idle = rss_mib(pid)
        lines += [f"idle RSS {idle:.0f} MiB", "", "| requests | RSS MiB | requests/s |", "|---|---|---|"]
        print("\n".join(lines), flush=True)
        cycled = itertools.cycle(texts)
        readings: dict[int, float] = {}
        for done in range(SAMPLE_EVERY, num_requests + 1, SAMPLE_EVERY):
            chunk = [next(cycled) for _ in range(SAMPLE_EVERY)]
            result = asyncio.run(drive(url, chunk, concurrency))
            if result.num_errors:
                raise RuntimeError(f"{result.num_errors} errors in requests {done - SAMPLE_EVERY}-{done}")
            readings[done] = rss_mib(pid)
            lines.append(f"| {done:,} | {readings[done]:.0f} | {result.requests_per_s:.0f} |")
            print(lines[-1], flush=True)
    first = GROWTH_FROM if GROWTH_FROM in readings else min(readings)
    start, end = readings[first], readings[max(readings)]
    lines += ["", f"growth from {first:,} to {max(readings):,} requests: {start:.0f} -> {end:.0f} MiB "
              f"({(end / start - 1) * 100:+.1f}%)", ""]  # fmt: skip
    return lines


# ---- 2. the mixed round ----------------------------------------------------------------------------------
@dataclass
class MixedLoad:
    queries: list[str]
    documents: list[str]
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def request(self) -> tuple[str, dict[str, Any]]:
        """One request of the mix: (path, JSON body)."""
        kind = self.rng.randrange(4)
        query = self.rng.choice(self.queries)
        if kind == 0:
            return "/embed", {"inputs": query}
        if kind == 1:
            return "/embed", {"inputs": self.rng.sample(self.documents, 32)}
        if kind == 2:
            return "/v1/embeddings", {"input": query, "model": "default"}
        return "/rerank", {"query": query, "texts": self.rng.sample(self.documents, NUM_RERANK_DOCUMENTS)}


async def closed_loop_rate(url: str, load: MixedLoad, seconds: float, concurrency: int) -> float:
    import aiohttp

    deadline, num_done = time.monotonic() + seconds, 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal num_done
        while time.monotonic() < deadline:
            path, body = load.request()
            async with session.post(path, json=body) as response:
                await response.read()
                num_done += response.status == 200

    start = time.monotonic()
    async with aiohttp.ClientSession(url) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return num_done / (time.monotonic() - start)


async def open_loop(url: str, load: MixedLoad, rate: float, seconds: float, pid: int) -> tuple[dict, list]:
    """Requests sent at ``rate`` per second whatever the answers; (status counts, RSS each second)."""
    import aiohttp

    statuses: dict[int, int] = {}
    readings: list[float] = []

    async def send(session: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> None:
        try:
            async with session.post(path, json=body) as response:
                await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
        except aiohttp.ClientError:
            statuses[0] = statuses.get(0, 0) + 1

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as session:
        start, tasks, next_reading = time.monotonic(), [], 1.0
        for index in itertools.count():
            due = start + index / rate
            if due > start + seconds:
                break
            while (now := time.monotonic()) < due:
                await asyncio.sleep(min(due - now, 0.01))
            if now - start >= next_reading:
                readings.append(rss_mib(pid))
                next_reading += 1.0
            tasks.append(asyncio.create_task(send(session, *load.request())))
        await asyncio.gather(*tasks)
    readings.append(rss_mib(pid))
    return statuses, readings


def mixed_round(load: MixedLoad, seconds: float, overload: float, env: dict[str, str]) -> list[str]:
    lines = [f"## Mixed round: /embed (1 and 32 texts), /v1/embeddings, /rerank of {NUM_RERANK_DOCUMENTS}; "
             f"open loop at {overload:g}x capacity for {seconds:g} s, --max-concurrent-requests "
             f"{MIXED_MAX_CONCURRENT}", ""]  # fmt: skip
    args = ["--max-concurrent-requests", str(MIXED_MAX_CONCURRENT)]
    with wde_server(env, args) as (url, pid):
        idle = rss_mib(pid)
        capacity = asyncio.run(closed_loop_rate(url, load, 15.0, MIXED_MAX_CONCURRENT))
        statuses, readings = asyncio.run(open_loop(url, load, overload * capacity, seconds, pid))
    bound = 1.5 * idle + 200
    every_10 = ", ".join(f"{value:.0f}" for value in readings[::10])
    lines += [
        f"idle RSS {idle:.0f} MiB; capacity {capacity:.1f} requests/s (closed loop, {MIXED_MAX_CONCURRENT} "
        f"clients); sent {overload * capacity:.1f}/s",
        f"answers by status: {dict(sorted(statuses.items()))}",
        f"RSS every 10 s: {every_10} MiB",
        f"end RSS {readings[-1]:.0f} MiB, max {max(readings):.0f} MiB; bound 1.5 x idle + 200 = {bound:.0f} "
        f"MiB: {'within' if max(readings) <= bound else 'OVER'}",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=shared_data_path("queries.jsonl"), help="one-text requests")
    parser.add_argument("--documents", default=shared_data_path("docs.jsonl"), help="32-text and rerank")
    parser.add_argument("--requests", type=int, default=30_000, help="soak requests (a multiple of 1,000)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--mixed-seconds", type=float, default=60.0)
    parser.add_argument("--overload", type=float, default=2.0, help="the mixed round's rate / capacity")
    parser.add_argument("--skip", choices=["soak", "mixed"], action="append", default=[])
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeat)")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    queries = load_texts(args.data)
    documents = load_texts(args.documents, 2_000)
    cpu = f"{cpu_model()}; ISA {' '.join(isa_flags(cpu_flags())) or 'none of avx2 / avx512* / amx*'}"
    lines = ["# wde serve memory", "", f"- CPU {cpu}", f"- server environment: {env or 'as is'}", ""]
    print("\n".join(lines), flush=True)
    if "soak" not in args.skip:
        lines += soak(queries, args.requests, args.concurrency, env)
        print("\n".join(lines[-2:]), flush=True)  # the growth
    if "mixed" not in args.skip:
        mixed = mixed_round(MixedLoad(queries, documents), args.mixed_seconds, args.overload, env)
        lines += mixed
        print("\n".join(mixed), flush=True)


if __name__ == "__main__":
    main()
