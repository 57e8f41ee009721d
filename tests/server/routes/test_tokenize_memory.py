"""The issue's /tokenize repro on a real, cold ``wde serve`` (no request before): four 1.99 MB bodies at once
(refused by the per-text character limit), four requests past --max-tokenize-tokens (refused after
tokenizing) and four answers of ~80,000 tokens each keep /health under 0.5 s meanwhile, and RSS 5 s later
within 10% of before.

What such requests leave, cold: before ``wde serve`` kept one malloc arena
(``server/process/memory_release.py``), the tokenizer's and the threadpool's threads each held a glibc arena
whose freed top ``malloc_trim`` does not return: +125 MiB after the four refused-after-tokenizing requests
(450 -> 579 MiB), +60-120 MiB after a round in all. With one arena, measured on 2 cores: 450 -> 455-457 MiB
(+1%), the threadpool's new threads (their stacks) and the first requests' one-time state (validators, the
route's imports)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.server.serve_process import ServeProcess, serve_process

pytestmark = pytest.mark.slow

MAX_HEALTH_SECONDS = 0.5
MAX_RSS_GROWTH = 0.10
BODIES = [
    ({"inputs": "debian " * 284_000}, 422),  # the 1.99 MB: over the 1,000,000-character limit
    ({"inputs": ["debian " * 142_000] * 2}, 422),  # 284,000 tokens: over --max-tokenize-tokens
    ({"inputs": "debian " * 40_000}, 200),  # 80,002 tokens answered (~5.6 MB of JSON, streamed)
]


def wait_for_row_bucket_warm_up(server: ServeProcess, timeout: float = 60.0) -> None:
    """Where the CPU runner pads to row buckets, its idle warm-up builds their oneDNN primitives (tens of
    MiB) right after start-up: "before" is read once that is done, so the growth measured is the requests'."""
    deadline = time.monotonic() + timeout
    while "row buckets on" in server.log() and "built while idle" not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.1)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def _slowest_health(client: httpx.AsyncClient, stop: asyncio.Event) -> float:
    slowest = 0.0
    while not stop.is_set():
        start = time.perf_counter()
        assert (await client.get("/health")).status_code == 200
        slowest = max(slowest, time.perf_counter() - start)
        await asyncio.sleep(0.05)
    return slowest


async def _four_at_once(url: str, pid: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        before = rss_mib(pid)  # cold: no request yet
        for body, status in BODIES:
            stop = asyncio.Event()
            health = asyncio.create_task(_slowest_health(client, stop))
            answers = await asyncio.gather(*(client.post("/tokenize", json=body) for _ in range(4)))
            stop.set()
            assert [answer.status_code for answer in answers] == [status] * 4, answers[0].text[:300]
            if status == 200:
                assert len(answers[0].json()[0]) == 80_002
            assert await health < MAX_HEALTH_SECONDS
        await asyncio.sleep(5)
        after = rss_mib(pid)
        assert after <= before * (1 + MAX_RSS_GROWTH), f"RSS {before:.0f} MiB before, {after:.0f} MiB after"


def test_large_tokenize_requests_keep_health_and_rss(tmp_path: Path) -> None:
    with serve_process(tmp_path, "--no-access-log") as server:
        server.wait_healthy()
        wait_for_row_bucket_warm_up(server)
        asyncio.run(_four_at_once(server.url, server.process.pid))
