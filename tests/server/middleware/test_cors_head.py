"""Browser and probe friendliness: --cors-allow-origins (preflight answered before the key check), HEAD on
the GET routes, --api-key-file (the key out of ``ps``), and the checks on the new limits."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from server import cli
from server.settings import ServerSettings
from tests.server.conftest import LiveServer, asgi_client, live_uvicorn
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

ORIGIN = "https://app.example"
PREFLIGHT = {
    "origin": ORIGIN,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type",
}
GET_ROUTES = ["/health", "/info", "/v1/models", "/metrics"]


async def test_cors_preflight_is_answered_before_the_api_key_check(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, api_key="k", cors_allow_origins=[ORIGIN]) as (client, _):
        preflight = await client.options("/v1/embeddings", headers=PREFLIGHT)
        stranger = await client.options(
            "/v1/embeddings", headers={**PREFLIGHT, "origin": "https://evil.example"}
        )
        with_key = await client.post(
            "/v1/embeddings", json={"input": "x"}, headers={"origin": ORIGIN, "authorization": "Bearer k"}
        )
        without_key = await client.post("/v1/embeddings", json={"input": "x"}, headers={"origin": ORIGIN})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert stranger.status_code == 400 and "access-control-allow-origin" not in stranger.headers
    assert with_key.status_code == 200 and with_key.headers["access-control-allow-origin"] == ORIGIN
    # the browser may read the 401 too, so the page can say what went wrong
    assert without_key.status_code == 401 and without_key.headers["access-control-allow-origin"] == ORIGIN


async def test_cors_is_off_by_default(async_engine: AsyncLLMEngine) -> None:
    async with asgi_client(async_engine, api_key="k") as (client, _):
        preflight = await client.options("/v1/embeddings", headers=PREFLIGHT)
    assert preflight.status_code == 401 and "access-control-allow-origin" not in preflight.headers


@pytest.fixture(scope="module")
def live_server(async_engine: AsyncLLMEngine) -> Iterator[LiveServer]:
    with live_uvicorn(async_engine, ServerSettings()) as server:
        yield server


def raw_head(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """One HEAD over a raw socket, with Connection: close: (status, headers, every byte after the head)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


@pytest.mark.parametrize("path", GET_ROUTES)
def test_head_on_get_routes_is_the_get_answer_without_a_body(live_server: LiveServer, path: str) -> None:
    status, headers, rest = raw_head(live_server.port, path)
    assert status == 200 and rest == b"", (status, rest[:100])
    assert int(headers["content-length"]) > 0  # the length GET would send


def test_head_on_a_post_route_is_405(live_server: LiveServer) -> None:
    status, headers, rest = raw_head(live_server.port, "/embed")
    assert status == 405 and rest == b"" and "POST" in headers["allow"]


async def test_api_key_file(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("  s3cret\n", encoding="utf-8")  # as `echo s3cret > key` writes it, and then some
    async with asgi_client(async_engine, api_key_file=str(key_file)) as (client, state):
        refused = await client.post("/embed", json={"inputs": "x"})
        accepted = await client.post(
            "/embed", json={"inputs": "x"}, headers={"authorization": "Bearer s3cret"}
        )
    assert refused.status_code == 401 and accepted.status_code == 200
    assert state.settings.api_key == "s3cret"
    args = cli.build_parser().parse_args(["serve", "--api-key-file", str(key_file)])
    assert args.api_key_file == str(key_file)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (ServerSettings(api_key="k", api_key_file="/any"), "both set"),
        (ServerSettings(api_key_file="/no/such/file"), "cannot be read"),
    ],
)
def test_bad_api_key_file_is_refused(settings: ServerSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings.with_api_key_file()


def test_empty_api_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        ServerSettings(api_key_file=str(tmp_path / "key")).with_api_key_file()


@pytest.mark.parametrize(
    "bad",
    [
        {"body_read_timeout": 0},
        {"header_read_timeout": -1.0},
        {"keep_alive_timeout": True},
        {"max_header_bytes": 0},
        {"cors_allow_origins": [""]},
    ],
)
def test_limits_are_checked(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ServerSettings(**bad).verify()


def test_limits_are_flags() -> None:
    args = cli.build_parser().parse_args(
        ["serve", "--body-read-timeout", "2.5", "--max-header-bytes", "1024", "--cors-allow-origins", "*"]
    )
    assert (args.body_read_timeout, args.max_header_bytes, args.cors_allow_origins) == (2.5, 1024, ["*"])
    defaults = cli.build_parser().parse_args(["serve"])
    timeouts = (defaults.body_read_timeout, defaults.header_read_timeout, defaults.keep_alive_timeout)
    assert timeouts == (30, 10, 5)
    assert defaults.max_header_bytes == 65536 and defaults.cors_allow_origins is None
