"""``JsonBodyRoute``: a FastAPI route class for the hot routes (``/embed``, ``/v1/embeddings``,
``/embeddings``) that takes a well-formed body a shorter way, and any other body FastAPI's way.

The short way, for a body sent as ``application/json`` that orjson parses and the route's request model
accepts: ``orjson.loads``, ``Model.model_validate`` (the same pydantic validation FastAPI runs on the parsed
body) and the endpoint, called with the model and the ``Request``. It skips FastAPI's content-type parsing
(``email.message``), the standard library's JSON parser and the dependency solver, about a tenth of a short
request's CPU. Everything else (no or another content type, JSON orjson refuses, a body the model refuses)
goes to FastAPI's own handler, which parses it again: its answers, the 422's field names and messages
included, are FastAPI's exactly. The route's schema in /openapi.json is FastAPI's as well.

A route qualifies when its endpoint is a coroutine taking one request model (a pydantic model, not embedded)
and the ``Request``, and nothing else (no dependencies, query, path, header or cookie parameters), and is
declared to return a ``Response`` (so FastAPI would send what it returns as it is).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

JSON_CONTENT_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})


FastHandler = Callable[[Request], Coroutine[Any, Any, Response | None]]


class JsonBodyRoute(APIRoute):
    # the short way alone (None: the route does not qualify): the endpoint's response, or None for a body
    # that needs FastAPI's way. ``server/direct_routes.py`` calls it from the request pipeline.
    fast_handler: FastHandler | None = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fastapi_handler = super().get_route_handler()
        self.fast_handler = fast_handler = _fast_handler(self)
        if fast_handler is None:
            return fastapi_handler

        async def handler(request: Request) -> Response:
            response = await fast_handler(request)
            return response if response is not None else await fastapi_handler(request)

        return handler


def _fast_handler(route: APIRoute) -> FastHandler | None:
    shape = _fast_shape(route)
    if shape is None:
        return None
    model, body_name, request_name = shape
    endpoint = route.endpoint

    async def fast_handler(request: Request) -> Response | None:
        body = await request.body()  # kept by the request: FastAPI's handler reads it again if needed
        if not body or _content_type(request) not in JSON_CONTENT_TYPES:
            return None
        try:
            parsed = model.model_validate(orjson.loads(body))
        except (orjson.JSONDecodeError, ValidationError):
            return None  # FastAPI's answer, word for word
        response: Response = await endpoint(**{body_name: parsed, request_name: request})
        return response

    return fast_handler


def _fast_shape(route: APIRoute) -> tuple[type[BaseModel], str, str] | None:
    """(request model, its parameter's name, the Request parameter's name) when the route qualifies."""
    dependant = route.dependant
    returns = typing.get_type_hints(route.endpoint).get("return")
    if (
        not inspect.iscoroutinefunction(route.endpoint)
        or not (isinstance(returns, type) and issubclass(returns, Response))
        or route._embed_body_fields
        or len(dependant.body_params) != 1
        or dependant.request_param_name is None
        or dependant.dependencies
        or dependant.path_params
        or dependant.query_params
        or dependant.header_params
        or dependant.cookie_params
        or dependant.response_param_name
        or dependant.background_tasks_param_name
    ):
        return None
    (field,) = dependant.body_params
    model = field.field_info.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    return model, field.name, dependant.request_param_name


def _content_type(request: Request) -> bytes | None:
    for name, value in request.scope["headers"]:
        if name == b"content-type" or (len(name) == 12 and name.lower() == b"content-type"):
            return value.lower()
    return None
