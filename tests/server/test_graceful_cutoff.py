"""``wde serve --graceful-timeout 1`` with 20 long requests in flight, then SIGTERM: each request still
running when the timeout ends gets our JSON 503 with Retry-After (not uvicorn's plain-text 500), the log
has one line with their count and no traceback, and the process exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import LONG_TEXT
from tests.server.test_cli import REPO, _healthy, _in_flight, free_port, wde_command

TIMEOUT = 90.0
NUM_REQUESTS = 20
TEXTS = [LONG_TEXT] * 64  # 64 inputs of 256 tokens: together far more than a second of CPU work


@pytest.mark.slow  # a real `wde serve` process
def test_requests_cut_off_by_the_graceful_timeout_get_json_503(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*wde_command(), "serve", "--port", str(port), "--graceful-timeout", "1"],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "WDE_LOG_LEVEL": "warning"},
        )
    responses: list[httpx.Response] = []
    try:
        # 1. ready
        deadline = time.monotonic() + TIMEOUT
        while not _healthy(url):
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)

        # 2. 20 long requests in flight
        def post() -> None:
            responses.append(httpx.post(f"{url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT))

        clients = [threading.Thread(target=post) for _ in range(NUM_REQUESTS)]
        for client in clients:
            client.start()
        while _in_flight(url) < NUM_REQUESTS:
            assert time.monotonic() < deadline, "the requests never arrived"
            time.sleep(0.01)
        # 3. SIGTERM: one second for them, then the rest are cut off
        process.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(TIMEOUT)
        assert process.wait(TIMEOUT) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
    log_text = log_path.read_text()
    assert len(responses) == NUM_REQUESTS
    cut_off = [response for response in responses if response.status_code != 200]
    assert cut_off, "every request finished within a second: make them longer"
    for response in cut_off:
        assert response.status_code == 503, (response.status_code, response.text)
        assert response.headers["retry-after"] == "1"
        body = response.json()
        assert body["error_type"] == "Unhealthy" and "--graceful-timeout" in body["error"]
    for response in responses:
        if response.status_code == 200:
            assert len(response.json()) == len(TEXTS)
    assert "Traceback" not in log_text and "Exception in ASGI application" not in log_text, log_text
    count_line = f"{len(cut_off)} request(s) still running after --graceful-timeout 1 s were answered 503"
    assert count_line in log_text, log_text
