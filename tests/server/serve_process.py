"""A real ``wde serve`` process on a free 127.0.0.1 port for tests: its log in a file, health polling, and
a kill on the way out whatever happened (every wait is bounded)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 90.0


def wde_command() -> list[str]:
    """The installed ``wde`` script when it is this package's (``make install``), else the same module."""
    script = Path(sys.executable).with_name("wde")
    if script.is_file() and "server.cli" in script.read_text(encoding="utf-8", errors="replace"):
        return [str(script)]
    return [sys.executable, "-m", "server.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def in_flight(url: str) -> float:
    """The server's wde_http_requests_in_flight gauge."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        if family.name == "wde_http_requests_in_flight":
            return family.samples[0].value
    raise AssertionError("no wde_http_requests_in_flight metric")


@dataclass
class ServeProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_healthy(self, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not healthy(self.url):
            assert self.process.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.1)

    def wait(self, timeout: float = TIMEOUT) -> int:
        return self.process.wait(timeout)


@contextmanager
def serve_process(
    tmp_path: Path, *args: str, command: Sequence[str] | None = None, env: dict[str, str] | None = None
) -> Iterator[ServeProcess]:
    """``wde serve --port P *args`` (or ``command serve --port P *args``), killed on exit if still up."""
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*(command or wde_command()), "serve", "--port", str(port), *args],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group: --api-workers' children go with it
        )
    try:
        yield ServeProcess(process, port, log_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        with contextlib.suppress(ProcessLookupError):  # what it left behind (a test that failed midway)
            os.killpg(process.pid, signal.SIGKILL)
