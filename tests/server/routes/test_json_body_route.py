"""JsonBodyRoute: a well-formed JSON body takes the short way (orjson + the request model), and every body
gets the same answer, status and bytes, as FastAPI's own handler gives (422 field names and messages
included)."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import orjson
import pytest
from fastapi import APIRouter, FastAPI, Request

from server import json_body_route
from server.error_answers import install_error_handlers
from server.json_body_route import JsonBodyRoute, _fast_shape
from server.protocols.openai import EmbeddingRequest
from server.protocols.tei import EmbedRequest
from server.responses import ORJSONResponse
from server.routes import embed, embeddings, openai

pytestmark = pytest.mark.anyio

JSON = "application/json"
BODIES = [  # (content type or None, body bytes)
    (JSON, b'{"inputs": "a text"}'),
    (JSON, b'{"inputs": ["a", "b"], "normalize": false, "dimensions": 8}'),
    ("application/json; charset=utf-8", b'{"inputs": "a", "unknown_field": 1}'),
    ("Application/JSON", b'{"inputs": "a"}'),
    (JSON, b'{"inputs": '),  # not JSON
    (JSON, b'{"inputs": "a", "dimensions": NaN}'),  # the standard library's JSON, not orjson's
    (JSON, b'{"inputs": "a", "dimensions": 100000000000000000000000000000}'),  # past 64 bits
    (JSON, b'{"inputs": "\\ud800"}'),  # a lone surrogate
    (JSON, b'{"inputs": 5}'),
    (JSON, b'{"inputs": []}'),
    (JSON, b'{"inputs": "a", "dimensions": -1}'),
    (JSON, b'{"inputs": "a", "truncate": "yes"}'),
    (JSON, b"[1, 2]"),
    (JSON, b"{}"),
    (JSON, b""),
    ("text/plain", b'{"inputs": "a"}'),
    (None, b'{"inputs": "a"}'),
    ("application/vnd.api+json", b'{"inputs": "a"}'),
]


def _app(route_class: type | None) -> FastAPI:
    app = FastAPI()
    router = APIRouter(route_class=route_class) if route_class else APIRouter()

    @router.post("/embed")
    async def echo(body: EmbedRequest, request: Request) -> ORJSONResponse:
        return ORJSONResponse(body.model_dump(mode="json"))

    @router.post("/v1/embeddings")
    async def echo_openai(body: EmbeddingRequest, request: Request) -> ORJSONResponse:
        return ORJSONResponse(body.model_dump(mode="json"))

    app.include_router(router)
    install_error_handlers(app, 1)
    return app


async def _answers(app: FastAPI, path: str) -> list[tuple[int, bytes]]:
    answers = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
        for content_type, body in BODIES:
            if path.startswith("/v1"):
                body = body.replace(b'"inputs"', b'"input"')
            headers = {"content-type": content_type} if content_type else {}
            response = await client.post(path, content=body, headers=headers)
            answers.append((response.status_code, response.content))
    return answers


@pytest.mark.parametrize("path", ["/embed", "/v1/embeddings"])
async def test_every_body_gets_fastapis_answer(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    num_parsed = 0

    def loads(data: bytes) -> object:
        nonlocal num_parsed
        num_parsed += 1
        return orjson.loads(data)

    monkeypatch.setattr(
        json_body_route, "orjson", SimpleNamespace(loads=loads, JSONDecodeError=orjson.JSONDecodeError)
    )
    fast, plain = await _answers(_app(JsonBodyRoute), path), await _answers(_app(None), path)
    for (content_type, body), got, expected in zip(BODIES, fast, plain, strict=True):
        assert got == expected, (content_type, body)
    assert [status for status, _ in fast][:4] == [200] * 4
    assert sum(status == 422 for status, _ in fast) >= 8
    assert num_parsed >= 4  # the JSON bodies took the short way (and the others fell back)


def test_the_hot_routes_take_the_short_way() -> None:
    routes = [route for module in (embed, openai, embeddings) for route in module.router.routes]
    posts = [route for route in routes if "POST" in getattr(route, "methods", ())]
    assert {route.path for route in posts} == {"/embed", "/v1/embeddings", "/embeddings"}
    for route in posts:
        assert isinstance(route, JsonBodyRoute) and _fast_shape(route) is not None, route.path
