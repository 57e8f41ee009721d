"""``wde serve --graceful-timeout 1`` with 20 long requests in flight, then SIGTERM: each request still
running when the timeout ends gets our JSON 503 with Retry-After (not uvicorn's plain-text 500), the log
has one line with their count and no traceback, and the process exits 0."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import LONG_TEXT
from tests.server.serve_process import in_flight, serve_process

TIMEOUT = 90.0
NUM_REQUESTS = 20
TEXTS = [LONG_TEXT] * 64  # 64 inputs of 256 tokens: together far more than a second of CPU work


@pytest.mark.slow  # a real `wde serve` process
def test_requests_cut_off_by_the_graceful_timeout_get_json_503(tmp_path: Path) -> None:
    responses: list[httpx.Response] = []
    with serve_process(tmp_path, "--graceful-timeout", "1", env={"WDE_LOG_LEVEL": "warning"}) as server:
        # 1. ready
        server.wait_healthy()
        deadline = time.monotonic() + TIMEOUT

        # 2. 20 long requests in flight
        def post() -> None:
            responses.append(httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}, timeout=TIMEOUT))

        clients = [threading.Thread(target=post) for _ in range(NUM_REQUESTS)]
        for client in clients:
            client.start()
        while in_flight(server.url) < NUM_REQUESTS:
            assert time.monotonic() < deadline, "the requests never arrived"
            time.sleep(0.01)
        # 3. SIGTERM: one second for them, then the rest are cut off
        server.process.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(TIMEOUT)
        assert server.wait() == 0, server.log()
        log_text = server.log()
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
