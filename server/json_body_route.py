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


class JsonBodyRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fastapi_handler = super().get_route_handler()
        shape = _fast_shape(self)
        if shape is None:
            return fastapi_handler
        model, body_name, request_name = shape
        endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            body = await request.body()  # kept by the request: FastAPI's handler reads it again if needed
            if body and _content_type(request) in JSON_CONTENT_TYPES:
                try:
                    parsed = model.model_validate(orjson.loads(body))
                except (orjson.JSONDecodeError, ValidationError):
                    return await fastapi_handler(request)  # FastAPI's answer, word for word
                response: Response = await endpoint(**{body_name: parsed, request_name: request})
                return response
            return await fastapi_handler(request)

        return handler


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
