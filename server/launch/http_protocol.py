"""``GuardedHttpToolsProtocol``: uvicorn's httptools protocol with a header read timeout and a header size
limit, which uvicorn lacks (its keep-alive timer starts only after a first response, and httptools buffers
headers of any size).

Per connection: a timer runs from the connection's start (or the first byte of a later request) until its
headers are complete; if it fires, the client gets 408 and the connection is closed. The bytes of an
unfinished header block are counted as they arrive and the complete block is measured, so a header block
over --max-header-bytes gets 431 and is closed before it is buffered much further. The body is the
application's to time (``RequestPipeline``).

A connection closed while its request is still arriving (431 mid-headers, 413 or 408 mid-body) lingers:
half-closed and drained for a bounded time (``server/launch/lingering_transport.py``), so that a client still
sending reads the answer instead of a connection reset.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server.error_answers import error_response
from server.errors import HeadersTooLargeError, RequestTimeoutError
from server.launch.coalescing_transport import CoalescingTransport
from server.launch.lingering_transport import LingeringTransport


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    header_read_timeout: float = 10.0  # set by ``guarded_protocol_class``
    max_header_bytes: int = 65536

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timer: asyncio.TimerHandle | None = None
        self.reading_headers = False  # from a request's first byte until its headers are complete
        self.num_header_bytes = 0  # of the unfinished header block, counted per received chunk
        self.refused = False  # answered 408 / 431 here: the parser's remaining callbacks are ignored
        self.receiving_request = False  # from a request's first byte until its body is complete
        self.lingering = False  # closing while the request arrives: what arrives is dropped
        self.lingering_transport: LingeringTransport | None = None

    # 1. the header timer: from the connection's start, and from the first byte of each later request
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.lingering_transport = LingeringTransport(transport, self)
        # an answer's head and body leave in one write (server/launch/coalescing_transport.py)
        super().connection_made(CoalescingTransport(self.lingering_transport, self.loop))  # type: ignore[arg-type]
        self._start_header_timer()

    def on_message_begin(self) -> None:
        if self.refused:
            return
        super().on_message_begin()
        self.receiving_request = True
        self.reading_headers = True
        self.num_header_bytes = 0
        if self.header_timer is None:
            self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        if self.lingering_transport is not None:
            self.lingering_transport.connection_lost()
        super().connection_lost(exc)

    # 2. the header size: the unfinished block as it arrives, the finished one exactly
    def data_received(self, data: bytes) -> None:
        if self.refused or self.lingering:
            return
        continuing = self.reading_headers  # a chunk that starts a request may end with its body
        super().data_received(data)
        if continuing and self.reading_headers and not self.refused:
            self.num_header_bytes += len(data)
            if self.num_header_bytes > self.max_header_bytes:
                self._refuse(self._too_large())

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.reading_headers = False
        self._cancel_header_timer()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_header_bytes:
            self._refuse(self._too_large())
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self.receiving_request = False
        if not self.refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        # a complete answer (head and body, joined) leaves now, not at the end of the loop iteration: when a
        # batch's ~30 answers are built in one iteration, the first client has its answer (and can send its
        # next request) before the last answer is built, 3-4 ms sooner (docs/benchmarks.md)
        if isinstance(self.transport, CoalescingTransport):
            self.transport.flush()
        super().on_response_complete()

    # 3. the answer, written here: no request reached the application
    def _start_header_timer(self) -> None:
        self.header_timer = self.loop.call_later(self.header_read_timeout, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_timeout(self) -> None:
        self.header_timer = None
        error = RequestTimeoutError(
            f"the request headers took longer than --header-read-timeout ({self.header_read_timeout:g} s); "
            "send them at once or raise the flag"
        )
        self._refuse(error)

    def _too_large(self) -> HeadersTooLargeError:
        return HeadersTooLargeError(
            f"the request line and headers are larger than --max-header-bytes ({self.max_header_bytes} "
            "bytes); send shorter headers or raise the flag"
        )

    def _refuse(self, error: Exception) -> None:
        """Answer ``error`` and close, unless an earlier request on this connection is still being answered:
        then that answer is the connection's last."""
        self.refused = True
        self._cancel_header_timer()
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
            return
        path = getattr(self, "url", b"").decode("latin-1").partition("?")[0]
        response = error_response(error, path, close=True)
        head = [STATUS_LINE[response.status_code]]
        for name, value in [*self.server_state.default_headers, *response.raw_headers]:
            head.extend([name, b": ", value, b"\r\n"])
        self.transport.write(b"".join([*head, b"\r\n", response.body]))
        self.transport.close()


def guarded_protocol_class(
    header_read_timeout: float, max_header_bytes: int
) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` option, with these limits."""
    limits = {"header_read_timeout": header_read_timeout, "max_header_bytes": max_header_bytes}
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), limits)
