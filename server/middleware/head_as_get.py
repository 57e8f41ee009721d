"""HEAD on a GET route (/health, /info, /v1/models, /metrics): the GET answer's status and headers, no
body. FastAPI routes declared with GET do not answer HEAD themselves (405)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        # A copy: the HTTP server keeps seeing HEAD in its own scope (and sends no body either).
        await self.app({**scope, "method": "GET"}, receive, send_without_body)
