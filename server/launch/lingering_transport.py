"""``LingeringTransport``: a connection's asyncio transport whose ``close()``, while the client is still
sending its request, half-closes and drains instead (what nginx calls a lingering close).

Closing a TCP socket with unread bytes in its receive buffer makes the kernel answer with a reset, and a
client still uploading its body (a 413 answered before the body was read, a 431 mid-headers) then gets
ECONNRESET instead of the answer already written. Half-closing sends the answer and a FIN; the bytes the
client keeps sending are read and dropped until it closes its side or ``LINGER_SECONDS`` pass (bounded:
a client that never stops costs at most that long), and only then is the socket closed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

LINGER_SECONDS = 2.0


class Receiving(Protocol):
    """What the transport asks of its HTTP protocol."""

    receiving_request: bool  # a request's bytes are still arriving (headers or body not complete)
    lingering: bool  # set here: drop what arrives from now on


class LingeringTransport:
    """Delegates to ``transport`` (write, pause_reading, get_extra_info, ...) except ``close`` and
    ``is_closing``."""

    def __init__(self, transport: asyncio.Transport, protocol: Receiving) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False
        self._linger_timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        """Close now, or, while the request is still arriving, half-close and drain for a bounded time."""
        if self._closing:
            return
        self._closing = True
        transport = self._transport
        if transport.is_closing() or not self._protocol.receiving_request or not transport.can_write_eof():
            transport.close()
            return
        # 1. what was written goes out, then a FIN: the client reads the answer and its end of the stream
        self._protocol.lingering = True
        transport.write_eof()
        # 2. its remaining bytes are read and dropped (reading may have been paused for the body's sake)
        transport.resume_reading()
        # 3. closed when it closes its side (the protocol's eof), or after LINGER_SECONDS
        self._linger_timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def connection_lost(self) -> None:
        """The socket is closed (either side): no timer left behind."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
