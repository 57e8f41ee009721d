"""``bind_listener(host, port)``: the server's listening socket, bound before the model loads, so a busy
port or a bad address fails at once in one line instead of after a long load."""

from __future__ import annotations

import errno
import socket

LISTEN_BACKLOG = 2048  # uvicorn's default


class StartupError(Exception):
    """A user error found at start-up (the command line, the model folder, the port): one line, exit 2."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); ``StartupError`` saying what to do when it cannot be bound."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise StartupError(f"--host {host!r} is not an address of this machine ({e.strerror})") from e
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} on {host} is in use (another server?); stop it or pass --port with a free port"
            ) from e
        if e.errno == errno.EACCES:
            raise StartupError(f"no permission to listen on {host}:{port}; pass --port 1024 or above") from e
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"http://{host}:{port}"
