"""One ``IgnoredFields`` record per HTTP request (``server/ignored_fields.py``): the request models add the
unknown fields they ignored, and the answer lists them in ``x-wde-ignored-fields``."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.ignored_fields import HEADER, IgnoredFields, current_ignored_fields


class IgnoredFieldsMiddleware:
    def __init__(self, app: ASGIApp, strict: bool) -> None:
        self.app = app
        self.strict = strict

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # A mutable record in the context: tasks the app starts copy the context, and share the record.
        record = IgnoredFields(strict=self.strict)
        token = current_ignored_fields.set(record)

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start" and record.names:
                MutableHeaders(scope=message).append(HEADER, record.header_value())
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        finally:
            current_ignored_fields.reset(token)
