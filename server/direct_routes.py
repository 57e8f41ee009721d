"""``DirectRoutes``: a POST to a hot JSON route goes from the request pipeline straight to the route's short
way (``JsonBodyRoute.fast_handler``), past Starlette's exception middleware, FastAPI's exit stacks, the
router's matching and FastAPI's request/response wrapper: about a quarter of the event loop's work for a
one-text /embed (py-spy, docs/benchmarks.md).

Only what the short way takes comes this way: the exact path of a route whose short way exists, POST, a
well-formed JSON body the request model accepts. Any other request, or a body the short way declines (then
replayed), takes the app's own way, so every 404 / 405 / redirect / 422 is the app's. An error the
endpoint raises gets the app's exception handler, chosen as Starlette's ExceptionMiddleware chooses (an
HTTPException's status handler first, then the handler of the nearest class in the error's MRO;
``Exception`` itself is not looked up: it goes on to ServerErrorMiddleware, as it would).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.json_body_route import FastHandler, JsonBodyRoute

ExceptionHandler = Callable[[Request, Exception], Any]


class DirectRoutes:
    def __init__(self, app: FastAPI, routes: Iterable[Any]) -> None:
        """``routes``: the route objects the app serves (the route modules' routers' routes)."""
        self.app = app
        self.by_path: dict[str, tuple[JsonBodyRoute, FastHandler]] = {
            route.path: (route, route.fast_handler)
            for route in routes
            if isinstance(route, JsonBodyRoute)
            and route.fast_handler is not None
            and route.methods == {"POST"}
        }

    def find(self, scope: Scope) -> tuple[JsonBodyRoute, FastHandler] | None:
        if scope["method"] != "POST":
            return None
        return self.by_path.get(scope["path"])

    async def serve(
        self,
        found: tuple[JsonBodyRoute, FastHandler],
        scope: Scope,
        receive: Receive,
        send: Send,
        app_way: ASGIApp,
    ) -> None:
        """Answer through the route's short way; a body it declines goes to ``app_way`` (the app below the
        pipeline), replayed."""
        route, fast_handler = found
        scope["route"], scope["endpoint"], scope["path_params"] = route, route.endpoint, {}  # as routing
        request = Request(scope, receive, send)
        try:
            response: Response | None = await fast_handler(request)
        except Exception as error:
            handler = self._handler_for(error)
            if handler is None:
                raise
            answer = handler(request, error)
            response = await answer if inspect.isawaitable(answer) else answer
            if response is None:
                return
        if response is None:
            await app_way(scope, replayed_body(await request.body(), receive), send)
            return
        await response(scope, receive, send)

    def _handler_for(self, error: Exception) -> ExceptionHandler | None:
        handlers = self.app.exception_handlers
        if isinstance(error, HTTPException) and error.status_code in handlers:
            return handlers[error.status_code]
        for cls in type(error).__mro__:
            if cls is Exception:
                return None  # ServerErrorMiddleware's (Starlette hands it no further down either)
            if cls in handlers:
                return handlers[cls]
        return None


def replayed_body(body: bytes, receive: Receive) -> Receive:
    """``receive`` that hands the already read body out (once), then ``receive``'s messages."""
    replayed = False

    async def receive_again() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again
