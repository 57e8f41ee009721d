"""A refusal reaches a client that is still sending: a chunked 5 MB upload to every POST route reads its 413
(before: the socket was closed with the upload's bytes unread, and the kernel's reset often reached the
client first: ECONNRESET), and an oversized header block still being sent reads its 431. The server
half-closes, drains for a bounded time, then closes (server/launch/lingering_transport.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from server.app import create_app
from server.settings import ServerSettings
from tests.server.conftest import LiveServer, live_uvicorn
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

UPLOAD_BYTES = 5_000_000
CHUNK_BYTES = 65_536
PAYLOAD_LIMIT = 1_000_000


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings(payload_limit=PAYLOAD_LIMIT)) as server:
        yield server


def post_routes(engine: AsyncLLMEngine) -> list[str]:
    app = create_app(engine)
    try:
        paths = [path for path, item in app.openapi()["paths"].items() if "post" in item]
    finally:
        app.state.wde.detach()
    return sorted(path for path in paths if "{" not in path)  # /v1/batches/{id}/cancel takes no body


def upload_then_read(port: int, head: bytes, body_chunks: Iterator[bytes]) -> tuple[int, dict, bytes]:
    """Send everything, as HTTP clients do (httpx, requests: a failed send is their error, the answer
    unread), then read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)  # a reset (or broken pipe) here is the defect: the client never sees the answer
        for chunk in body_chunks:
            sock.sendall(chunk)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < _answer_length(data):
            received = sock.recv(65536)
            if not received:
                break
            data += received
    head_text, _, body = data.partition(b"\r\n\r\n")
    lines = head_text.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _answer_length(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            return len(head) + 4 + int(line.split(":")[1])
    return len(data) + 1


def chunked_json(num_bytes: int) -> Iterator[bytes]:
    yield b'%x\r\n{"inputs": "\r\n' % len(b'{"inputs": "')
    for _ in range(num_bytes // CHUNK_BYTES):
        yield b"%x\r\n%s\r\n" % (CHUNK_BYTES, b"a" * CHUNK_BYTES)
    yield b'2\r\n"}\r\n0\r\n\r\n'


def test_a_chunked_5_mb_upload_reads_its_413_on_every_post_route(
    live_server: LiveServer, async_engine: AsyncLLMEngine
) -> None:
    routes = post_routes(async_engine)
    assert len(routes) >= 12, routes
    answers = {}
    for path in routes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: wde.test\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        status, headers, body = upload_then_read(live_server.port, head, chunked_json(UPLOAD_BYTES))
        answers[path] = status
        assert headers.get("connection") == "close"
        assert "--payload-limit" in json.dumps(json.loads(body)), body[:200]
    assert answers == dict.fromkeys(routes, 413)


def test_an_oversized_header_block_still_arriving_reads_its_431(live_server: LiveServer) -> None:
    head = b"POST /embed HTTP/1.1\r\nHost: wde.test\r\n"
    headers = (b"X-Filler-%d: %s\r\n" % (i, b"f" * 1000) for i in range(2000))  # ~2 MB of headers
    status, answer_headers, _ = upload_then_read(live_server.port, head, headers)
    assert status == 431 and answer_headers["connection"] == "close"
