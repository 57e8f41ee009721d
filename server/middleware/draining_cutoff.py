"""A request still running when --graceful-timeout ends is cancelled by uvicorn; answer it 503 (with
Retry-After) instead of uvicorn's plain-text 500 and a traceback, and count it for one line in the log."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.app_state import AppState
from server.errors import ServerDrainingError, error_response


class DrainingCutoffMiddleware:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def send_and_track(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, receive, send_and_track)
        except asyncio.CancelledError:
            if not self.state.draining:
                raise
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):  # Python >= 3.11
                task.uncancel()
            self.state.num_cut_off += 1
            if response_started:
                return  # half an answer: uvicorn closes the connection
            error = ServerDrainingError(
                "the server shut down before this request finished (--graceful-timeout); retry it on "
                "another replica"
            )
            retry_after = self.state.settings.retry_after_seconds
            await error_response(error, scope["path"], retry_after, close=True)(scope, receive, send)
