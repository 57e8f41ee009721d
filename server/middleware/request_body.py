"""Reads the request body within --payload-limit (413 otherwise, judged by Content-Length and by the bytes
that actually arrive) and within --body-read-timeout (408 and the connection closed otherwise), then runs
the handler and cancels it if the client disconnects meanwhile, so its engine requests are aborted instead
of computed for nobody. Admission comes after this (inside it): a slow body holds no admission slot."""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import PayloadTooLargeError, RequestTimeoutError, error_response


class RequestBodyMiddleware:
    def __init__(self, app: ASGIApp, payload_limit: int, body_read_timeout: float) -> None:
        self.app = app
        self.payload_limit = payload_limit
        self.body_read_timeout = body_read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # 1. the declared size: refuse before reading anything
        if _content_length(scope) > self.payload_limit:
            await self._too_large(scope, receive, send)
            return
        # 2. the actual size, in time
        try:
            body = await self._read_body_in_time(receive)
        except PayloadTooLargeError:
            await self._too_large(scope, receive, send)
            return
        except RequestTimeoutError as error:
            await error_response(error, scope["path"], close=True)(scope, receive, send)
            return
        if body is None:
            return  # the client left before sending its body
        # 3. the handler, cancelled when the client goes away
        await self._run_until_disconnect(scope, receive, send, body)

    async def _read_body_in_time(self, receive: Receive) -> bytes | None:
        """``_read_body`` cancelled after --body-read-timeout: a timer, not a task per request."""
        task = asyncio.current_task()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            if task is not None:
                task.cancel()

        timer = asyncio.get_running_loop().call_later(self.body_read_timeout, expire)
        try:
            return await self._read_body(receive)
        except asyncio.CancelledError:
            if not expired:
                raise  # cancelled from outside (shutdown)
            if task is not None and hasattr(task, "uncancel"):  # Python >= 3.11
                task.uncancel()
            raise RequestTimeoutError(
                f"the request body took longer than --body-read-timeout ({self.body_read_timeout:g} s) "
                "to arrive; send it faster or raise the flag"
            ) from None
        finally:
            timer.cancel()

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.payload_limit:
                raise PayloadTooLargeError
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _run_until_disconnect(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        """Plain asyncio rather than an anyio task group: this runs once per request, and a watcher task
        plus ``Task.cancel`` costs a fraction of a task group's scopes on the event loop thread."""
        handler = asyncio.current_task()
        disconnected = asyncio.Event()
        response_complete = False
        body_sent = False

        async def replay_body() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send_and_track(message: Message) -> None:
            nonlocal response_complete
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                response_complete = True

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()
            if not response_complete and handler is not None:
                handler.cancel()

        watcher = asyncio.get_running_loop().create_task(watch_disconnect())
        try:
            await self.app(scope, replay_body, send_and_track)
        except asyncio.CancelledError:
            if not disconnected.is_set() or response_complete:
                raise  # cancelled from outside (shutdown): not ours to swallow
            if handler is not None and hasattr(handler, "uncancel"):  # Python >= 3.11
                handler.uncancel()
        finally:
            watcher.cancel()

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = PayloadTooLargeError(
            f"the request body is larger than --payload-limit ({self.payload_limit} bytes); "
            "split the inputs over several requests"
        )
        await error_response(error, scope["path"], close=True)(scope, receive, send)


def _content_length(scope: Scope) -> int:
    try:
        return int(Headers(scope=scope).get("content-length", "0"))
    except ValueError:
        return 0  # the HTTP server rejects malformed lengths itself
