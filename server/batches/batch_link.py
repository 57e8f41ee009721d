"""``BatchLink``: one Batch API for all the API workers of ``wde serve --api-workers N``.

Only one process may run a --batch-dir (``server/batches/folder_lock.py``), so API worker 0, the batch
owner, runs it: its ``BatchService`` takes the folder as a single-process server's does (and turns the
Batch API off with the same 503 when another server holds the folder or it cannot be written), and it also
listens on a Unix socket in the engine link's folder (``mkdtemp``'s: only this user can reach it). Every
other worker forwards the ``/v1/files`` and ``/v1/batches`` requests it receives there
(``server/batches/batch_forwarder.py``) and returns the owner's answer unchanged.

A forwarded request passes the ``RequestPipeline`` of both workers. The first one, which the client reached,
checks the key, reads the body within the limits, admits it, counts it in /metrics and logs it; the owner
checks the key again (the client's header travels with the request) but neither admits nor counts nor logs
a request that arrived on its batch socket, so that each request takes one admission slot and one count.

A replaced worker keeps its index: a new owner takes the folder (the dead one's lock went with it) and the
socket (the dead one's file removed first); meanwhile the others answer 503 with Retry-After.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass

from server.process.listener import LISTEN_BACKLOG

logger = logging.getLogger("wde.server")

BATCH_OWNER = 0  # the index of the API worker that runs the Batch API
SOCKET_NAME = "batch-owner.sock"


@dataclass(frozen=True)
class BatchLink:
    socket_path: str  # the owner's Unix socket
    is_owner: bool  # this worker runs the Batch API (else: it forwards to socket_path)

    @classmethod
    def of_worker(cls, ipc_dir: str, index: int) -> BatchLink:
        return cls(os.path.join(ipc_dir, SOCKET_NAME), index == BATCH_OWNER)

    @property
    def runs_elsewhere(self) -> str:
        """Where the Batch API runs, in a worker that forwards to it ("" in the owner)."""
        return "" if self.is_owner else f"API worker {BATCH_OWNER}"

    @property
    def server(self) -> tuple[str, None]:
        """The ASGI scope's ``server`` of a request that arrived on the owner's socket (uvicorn's: the
        socket's path and no port)."""
        return (self.socket_path, None)

    def listen(self) -> socket.socket:
        """The owner's listening socket; connections wait in its backlog while the app starts."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)  # a replaced owner's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.socket_path)
            sock.listen(LISTEN_BACKLOG)
        except OSError:
            sock.close()
            raise
        logger.info(
            "API worker %d (pid %d) runs the Batch API; the other API workers forward /v1/files and "
            "/v1/batches to it",
            BATCH_OWNER,
            os.getpid(),
        )
        return sock

    def close(self, sock: socket.socket) -> None:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
