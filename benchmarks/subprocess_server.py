"""An HTTP server in a subprocess for a benchmark: started on a free 127.0.0.1 port, waited for until its
health route answers 200, stopped with SIGTERM. Its output goes to a temporary file (never a pipe nobody
reads) and is quoted when it fails to start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(
    name: str,
    command: list[str],
    health_url: str,
    startup_timeout_s: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    log_path: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Yields the server's process once healthy. ``log_path``: keep the server's output in this file (read
    it after the block), else a temporary one."""
    with log_path.open("w+b") if log_path is not None else tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd
        )
        try:
            _wait_healthy(name, process, health_url, startup_timeout_s, log)
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(
    name: str, process: subprocess.Popen[bytes], health_url: str, timeout_s: float, log: IO[bytes]
) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} on startup:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} was not healthy within {timeout_s:.0f} s:\n{_tail(log)}")
        try:
            if httpx.get(health_url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def _tail(log: IO[bytes], num_chars: int = 3000) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-num_chars:]
