"""CoalescingTransport: the writes of one event loop iteration reach the socket as one, in order; a large
write goes through at once (pending bytes first); close and write_eof send what is pending; nothing is
written to a closing connection; the server's protocol sends a complete answer at once."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from server.launch.coalescing_transport import MAX_JOINED_BYTES, CoalescingTransport
from server.launch.http_protocol import guarded_protocol_class


class RecordingTransport:
    """The socket's side: what reached it, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_one_iterations_writes_leave_together_and_in_order() -> None:
    async def main() -> RecordingTransport:
        socket = RecordingTransport()
        transport = CoalescingTransport(socket, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"")
        transport.write(bytearray(b"[1.0]"))
        assert socket.writes == [] and transport.get_write_buffer_size() == 24
        assert transport.get_extra_info("peername") == "info:peername"  # the rest is delegated
        await asyncio.sleep(0)
        transport.write(b"next")
        await asyncio.sleep(0)
        return socket

    assert asyncio.run(main()).writes == [b"HTTP/1.1 200 OK\r\n\r\n[1.0]", b"next"]


def test_a_large_write_goes_through_at_once_after_the_pending_bytes() -> None:
    large = b"x" * MAX_JOINED_BYTES

    async def main() -> RecordingTransport:
        socket = RecordingTransport()
        transport = CoalescingTransport(socket, asyncio.get_running_loop())
        transport.write(b"head")
        transport.write(large)
        assert socket.writes == [b"head", large]  # at once: a streamed answer's flow control holds
        transport.write(b"tail")
        transport.close()  # sends the pending tail first
        assert socket.writes[-1] == b"tail" and socket.closed
        await asyncio.sleep(0)  # the scheduled flush finds nothing left
        return socket

    assert len(asyncio.run(main()).writes) == 3


def test_write_eof_flushes_and_a_closed_connection_gets_nothing() -> None:
    async def main() -> tuple[RecordingTransport, RecordingTransport]:
        loop = asyncio.get_running_loop()
        first, second = RecordingTransport(), RecordingTransport()
        transport = CoalescingTransport(first, loop)
        transport.write(b"answer")
        transport.write_eof()
        gone = CoalescingTransport(second, loop)
        gone.write(b"answer")
        second.closed = True  # the client went away before the iteration ended
        await asyncio.sleep(0)
        return first, second

    first, second = asyncio.run(main())
    assert first.writes == [b"answer"] and first.eof
    assert second.writes == []


class ConnectionSocket(RecordingTransport):
    """What uvicorn's protocol asks of a connection's transport besides the writes."""

    def get_extra_info(self, name: str, default: object = None) -> object:  # type: ignore[override]
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_a_complete_answer_leaves_at_once_head_and_body_joined() -> None:
    """The server's protocol flushes when an answer is complete: when a batch's answers are built in one
    iteration, each leaves as it is done, not all at the iteration's end."""
    socket = ConnectionSocket()
    on_the_wire_when_sent: list[list[bytes]] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        await send({"type": "http.response.body", "body": b"[1.0]"})
        on_the_wire_when_sent.append(list(socket.writes))

    async def main() -> None:
        config = Config(app=app, log_level="warning", lifespan="off", http="httptools", proxy_headers=False)
        protocol = guarded_protocol_class(10.0, 65536)(config, ServerState(), {}, asyncio.get_running_loop())
        protocol.connection_made(socket)  # type: ignore[arg-type]
        protocol.data_received(b"POST /embed HTTP/1.1\r\nHost: wde\r\nContent-Length: 0\r\n\r\n")
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n[1.0]"
    assert on_the_wire_when_sent == [[answer]]  # one write, there before the app's send returned
    assert socket.writes == [answer]
