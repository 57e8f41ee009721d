"""Slow, silent and oversized clients against a real uvicorn (--max-concurrent-requests 2, short timeouts):
they get 408 / 431 and are disconnected, and never take the admission slots of the clients behind them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from server.settings import ServerSettings
from tests.server.conftest import LiveServer, live_uvicorn
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

MAX_CONCURRENT = 2
BODY_TIMEOUT = 2.0
HEADER_TIMEOUT = 2.0
KEEP_ALIVE = 1.0
MAX_HEADER_BYTES = 16384
MARGIN = 5.0  # seconds past a timeout before a test gives up waiting
BODY = json.dumps({"inputs": ["a slow body", "another"]}).encode()
HEAD = (
    "POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(BODY)}\r\n\r\n"
).encode()


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    settings = ServerSettings(
        max_concurrent_requests=MAX_CONCURRENT,
        body_read_timeout=BODY_TIMEOUT,
        header_read_timeout=HEADER_TIMEOUT,
        keep_alive_timeout=KEEP_ALIVE,
        max_header_bytes=MAX_HEADER_BYTES,
    )
    with live_uvicorn(async_engine, settings) as server:
        yield server


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict]:
    """(status, headers, JSON body) of one response, then the server must close the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    body = await reader.readexactly(int(headers["content-length"]))
    return int(lines[0].split()[1]), headers, json.loads(body)


async def assert_closed(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionResetError):  # reset: closed with bytes of ours still unread
        assert await reader.read(1) == b"", "the server kept the connection open"


async def normal_requests(url: str, num_requests: int = 3) -> list[tuple[int, float]]:
    """(status, seconds) of back-to-back small requests."""
    results: list[tuple[int, float]] = []
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(base_url=url, timeout=MARGIN) as client:
        for _ in range(num_requests):
            start = loop.time()
            response = await client.post("/embed", json={"inputs": "a normal client"})
            results.append((response.status_code, loop.time() - start))
    return results


def assert_served_at_once(results: list[tuple[int, float]], since: float, timeout: float) -> None:
    """200s, each well within a second (on this loaded 2-core machine: 1.5 s), before ``timeout`` passed
    (``since``: when the slow clients started): no request waited for a slow client to be evicted."""
    assert all(status == 200 for status, _ in results), results
    assert max(seconds for _, seconds in results) < 1.5, results
    assert asyncio.get_running_loop().time() - since < timeout, results


@pytest.mark.parametrize("trickle", [False, True], ids=["no-body", "one-byte-per-interval"])
def test_slow_bodies_hold_no_slot_and_get_408(live_server: LiveServer, trickle: bool) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        streams = [
            await asyncio.open_connection("127.0.0.1", live_server.port) for _ in range(MAX_CONCURRENT + 10)
        ]
        start = loop.time()
        for _, writer in streams:
            writer.write(HEAD)
            await writer.drain()

        async def trickle_body(writer: asyncio.StreamWriter) -> None:
            for byte in BODY[: len(BODY) - 1]:  # never the whole body
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.25)

        tricklers = [loop.create_task(trickle_body(writer)) for _, writer in streams] if trickle else []
        # the normal client keeps being served while every slow request waits for its body
        assert_served_at_once(await normal_requests(live_server.url), start, BODY_TIMEOUT)
        # each slow request: 408 with Connection: close once the read timeout passes, then disconnected
        for reader, writer in streams:
            status, headers, body = await asyncio.wait_for(read_answer(reader), BODY_TIMEOUT + MARGIN)
            assert status == 408 and headers["connection"] == "close", (status, headers)
            assert "--body-read-timeout (2 s)" in body["error"] and body["error_type"] == "Validation"
            await asyncio.wait_for(assert_closed(reader), MARGIN)
            writer.close()
        assert loop.time() - start >= BODY_TIMEOUT
        for task in tricklers:
            task.cancel()
        await asyncio.gather(*tricklers, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert httpx.post(f"{live_server.url}/embed", json={"inputs": "after"}, timeout=MARGIN).status_code == 200


@pytest.mark.parametrize("first_bytes", [b"", b"POST /embed HTTP/1.1\r\nHost: x\r\nX-Slow: "])
def test_silent_and_slow_header_blocks_get_408(live_server: LiveServer, first_bytes: bytes) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        opening = loop.time()  # the server's header timer starts at each accept, after this
        streams = [await asyncio.open_connection("127.0.0.1", live_server.port) for _ in range(10)]
        start = loop.time()

        async def trickle_headers(writer: asyncio.StreamWriter) -> None:
            writer.write(first_bytes)
            while first_bytes:  # one more header byte every 0.2 s, never the end of the block
                await asyncio.sleep(0.2)
                writer.write(b"a")
                await writer.drain()

        tricklers = [loop.create_task(trickle_headers(writer)) for _, writer in streams]
        assert_served_at_once(await normal_requests(live_server.url), start, HEADER_TIMEOUT)
        for reader, writer in streams:
            status, headers, body = await asyncio.wait_for(read_answer(reader), HEADER_TIMEOUT + MARGIN)
            assert status == 408 and headers["connection"] == "close"
            assert "--header-read-timeout (2 s)" in body["error"]
            await asyncio.wait_for(assert_closed(reader), MARGIN)
            writer.close()
        assert loop.time() - opening >= HEADER_TIMEOUT
        for task in tricklers:
            task.cancel()
        await asyncio.gather(*tricklers, return_exceptions=True)

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_idle_keep_alive_connection_is_closed(live_server: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=KEEP_ALIVE + MARGIN) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        start = time.monotonic()
        data = b""
        while chunk := sock.recv(65536):  # the answer, then the close after --keep-alive-timeout
            data += chunk
        assert data.startswith(b"HTTP/1.1 200 ")
        assert KEEP_ALIVE * 0.9 <= time.monotonic() - start < KEEP_ALIVE + MARGIN


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES * 2, 8 * 1024 * 1024])
def test_oversized_header_block_gets_431(live_server: LiveServer, size: int) -> None:
    async def scenario() -> tuple[int, dict[str, str], dict]:
        reader, writer = await asyncio.open_connection("127.0.0.1", live_server.port)
        block = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
        writer.write(block)
        try:
            answer = await asyncio.wait_for(read_answer(reader), MARGIN)
            await asyncio.wait_for(assert_closed(reader), MARGIN)
        finally:
            writer.transport.abort()  # the rest of the block stays unsent
        return answer

    status, headers, body = asyncio.run(scenario())
    assert status == 431 and headers["connection"] == "close"
    assert body["error"]["code"] == "headers_too_large" and "--max-header-bytes (16384 bytes)" in str(body)
    # a header block just under the limit is fine
    response = httpx.get(f"{live_server.url}/v1/models", headers={"x-big": "a" * 8000}, timeout=MARGIN)
    assert response.status_code == 200
