"""DirectRoutes: the request pipeline answers the hot JSON routes through their short way, past the app's
routing layers, and every request gets the answer (status, headers, bytes) the app's own way gives: bodies
the short way declines, endpoint errors (handled, HTTPException, unhandled), other methods and paths."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, FastAPI, HTTPException, Request
from starlette.types import Receive, Scope, Send

from server.direct_routes import DirectRoutes
from server.error_answers import install_error_handlers
from server.errors import TooManyInputsError
from server.json_body_route import JsonBodyRoute
from server.protocols.tei import EmbedRequest
from server.responses import ORJSONResponse
from tests.server.routes.test_json_body_route import BODIES

pytestmark = pytest.mark.anyio


class Unexpected(RuntimeError):
    pass


def _app() -> tuple[FastAPI, APIRouter]:
    app = FastAPI()
    router = APIRouter(route_class=JsonBodyRoute)

    @router.post("/embed")
    async def echo(body: EmbedRequest, request: Request) -> ORJSONResponse:
        text = body.inputs[0] if isinstance(body.inputs, list) and body.inputs else body.inputs
        if text == "http":
            raise HTTPException(status_code=418, detail="a teapot")
        if text == "handled":
            raise TooManyInputsError("3 inputs, at most 2 (--max-client-batch-size)")
        if text == "unexpected":
            raise Unexpected("a bug")
        return ORJSONResponse({**body.model_dump(mode="json"), "route": request.scope["route"].path})

    app.include_router(router)
    install_error_handlers(app, 1)
    return app, router


class Pipeline:
    """What RequestPipeline does with DirectRoutes (its other steps left out), counting the direct hits."""

    def __init__(self, app: FastAPI, direct: DirectRoutes) -> None:
        self.app, self.direct, self.num_direct = app, direct, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.direct.find(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        self.num_direct += 1
        await self.direct.serve(found, scope, receive, send, self.app)


REQUESTS = [  # (method, path, content type, body)
    *[("POST", "/embed", content_type, body) for content_type, body in BODIES],
    ("POST", "/embed", "application/json", b'{"inputs": "http"}'),
    ("POST", "/embed", "application/json", b'{"inputs": "handled"}'),
    ("GET", "/embed", None, b""),
    ("POST", "/embed/", "application/json", b'{"inputs": "a"}'),
    ("POST", "/nowhere", "application/json", b'{"inputs": "a"}'),
]


async def _answers(asgi_app: object) -> list[tuple[int, dict[str, str], bytes]]:
    answers = []
    transport = httpx.ASGITransport(app=asgi_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
        for method, path, content_type, body in REQUESTS:
            headers = {"content-type": content_type} if content_type else {}
            response = await client.request(method, path, content=body, headers=headers)
            answers.append((response.status_code, dict(response.headers), response.content))
    return answers


async def test_every_request_gets_the_apps_answer() -> None:
    app, router = _app()
    pipeline = Pipeline(app, DirectRoutes(app, router.routes))
    direct, plain = await _answers(pipeline), await _answers(_app()[0])
    for request, got, expected in zip(REQUESTS, direct, plain, strict=True):
        assert got == expected, request
    statuses = [status for status, _, _ in direct]
    assert statuses[:4] == [200] * 4
    assert statuses[len(BODIES) : len(BODIES) + 2] == [418, 413]  # the endpoint's errors, as handled
    assert direct[0][2].endswith(b'"route":"/embed"}')  # the scope names the route, as routing does
    assert pipeline.num_direct == len(BODIES) + 2  # every POST /embed; the GET, /embed/, /nowhere not


async def test_an_unhandled_error_goes_on_up_as_from_the_app() -> None:
    app, router = _app()
    for asgi_app in (Pipeline(app, DirectRoutes(app, router.routes)), app):
        transport = httpx.ASGITransport(app=asgi_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
            with pytest.raises(Unexpected):
                await client.post("/embed", json={"inputs": "unexpected"})


def test_only_post_routes_with_a_short_way_are_direct() -> None:
    app, router = _app()

    @router.get("/info")
    async def info() -> dict[str, str]:
        return {}

    direct = DirectRoutes(app, router.routes)
    assert set(direct.by_path) == {"/embed"}


async def test_under_a_ray_serve_route_prefix_the_hot_route_is_still_direct() -> None:
    """Serve hands the replica ``/<prefix>/embed`` with ``root_path`` ``/<prefix>``; the replica's outermost
    StripRoutePrefixMiddleware gives the pipeline ``/embed``, so the short way is taken there too."""
    replica = pytest.importorskip("server.ray_serve.replica", reason="ray is not installed")
    app, router = _app()
    pipeline = Pipeline(app, DirectRoutes(app, router.routes))
    transport = httpx.ASGITransport(app=replica.StripRoutePrefixMiddleware(pipeline), root_path="/minilm")
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
        response = await client.post("/minilm/embed", json={"inputs": "a"})
    assert response.status_code == 200 and response.json()["route"] == "/embed"
    assert pipeline.num_direct == 1
