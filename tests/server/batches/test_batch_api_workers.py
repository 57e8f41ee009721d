"""The Batch API of a real ``wde serve --api-workers 2``: worker 0 runs it, the other forwards its
``/v1/files`` and ``/v1/batches`` requests there (server/batches/batch_link.py). Every request goes on a
fresh connection, so the kernel spreads them over both workers: the official openai SDK uploads, creates,
polls, downloads and lists, every answer 200 and the same wherever it lands, each request counted once in
/metrics and admitted once (under --max-concurrent-requests 1); a killed worker 0 makes the other answer
503 with Retry-After until its replacement, which serves the same batches."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.server.batches.test_batch_api import FINISHED, embedding_line, jsonl, records
from tests.server.conftest import TOLERANCE
from tests.server.serve_process import ServeProcess, serve_process
from tests.tiny_models import training_texts

pytestmark = pytest.mark.slow  # a real server with two API workers, one of them killed and replaced

NUM_LINES = 24
BUSY_RETRIES = 5
NUM_ROUNDS = 10  # each route this many times more, on fresh connections
TIMEOUT = 60.0


class FreshConnections(httpx.HTTPTransport):
    """One new connection per request (none kept alive). A 429 is retried a few times at once: a worker
    frees its admission slot just after its answer's last byte, so the next request of a sequential client,
    on another worker, can find the one slot still taken. A request admitted twice (by the worker the
    client reached and again by worker 0) would be refused every time."""

    def __init__(self) -> None:
        super().__init__(limits=httpx.Limits(max_keepalive_connections=0))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(BUSY_RETRIES):
            response = super().handle_request(request)
            if response.status_code != 429:
                return response
            response.close()
            time.sleep(0.05)
        return super().handle_request(request)


def fresh_connections(url: str) -> OpenAI:
    """The openai SDK on ``FreshConnections``, never retrying itself."""
    http = httpx.Client(transport=FreshConnections(), timeout=TIMEOUT)
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, http_client=http)


def requests_counted(server: ServeProcess, route: str) -> float:
    """The server's count of ``route``'s 200 answers (the 429s ``FreshConnections`` retried aside)."""
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        if family.name == "wde_http_requests":
            return sum(
                sample.value
                for sample in family.samples
                if sample.name == "wde_http_requests_total"
                and sample.labels["route"] == route
                and sample.labels["status"] == "200"
            )
    return 0.0


def gone(pid: int) -> bool:
    """The process has exited (a zombie until its parent reaps it, which accepts nothing)."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (each process's parent read from Linux's ``/proc/PID/stat``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])  # after the name: state, ppid
            children.setdefault(parent, []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


@contextmanager
def whole_server(tmp_path: Path, *args: str) -> Iterator[ServeProcess]:
    """``serve_process``; after a failure its workers and engine process are killed with it (killing the
    parent alone would leave them running)."""
    with serve_process(tmp_path, *args) as server:
        try:
            yield server
        finally:
            if server.process.poll() is None:
                children = descendants(server.process.pid)
                server.process.kill()  # first, so that it replaces nobody
                server.process.wait()
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def test_every_api_worker_answers_the_batch_api(tmp_path: Path) -> None:
    texts = training_texts()[:NUM_LINES]
    content = jsonl([embedding_line(f"doc-{i}", {"input": text}) for i, text in enumerate(texts)])
    args = ("--api-workers", "2", "--max-concurrent-requests", "1", "--batch-dir", str(tmp_path / "batches"))
    args += ("--log-level", "debug")
    with whole_server(tmp_path, *args) as server:
        server.wait_healthy()
        client = fresh_connections(server.url)
        # 1. a batch from upload to output, each step on whichever worker takes the connection
        uploaded = client.files.create(file=("docs.jsonl", content), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
        )
        deadline = time.monotonic() + TIMEOUT
        while (batch := client.batches.retrieve(batch.id)).status not in FINISHED:
            assert time.monotonic() < deadline, f"batch {batch.id} still {batch.status}"
            time.sleep(0.05)
        assert batch.status == "completed", batch
        assert batch.request_counts.model_dump() == {"total": NUM_LINES, "completed": NUM_LINES, "failed": 0}
        output = records(client.files.content(batch.output_file_id).text)
        live = client.embeddings.create(input=texts, model="any", encoding_format="float")
        assert [record["custom_id"] for record in output] == [f"doc-{i}" for i in range(NUM_LINES)]
        got = np.array([row["embedding"] for record in output for row in record["response"]["body"]["data"]])
        np.testing.assert_allclose(got, np.array([row.embedding for row in live.data]), atol=TOLERANCE)
        # 2. the same answers on every connection, each request counted once
        files_before = requests_counted(server, "/v1/files")
        for _ in range(NUM_ROUNDS):
            assert [listed.id for listed in client.batches.list().data] == [batch.id]
            assert client.batches.retrieve(batch.id) == batch
            assert {listed.id for listed in client.files.list().data} == {uploaded.id, batch.output_file_id}
            assert client.files.retrieve(uploaded.id) == uploaded
            assert client.files.content(uploaded.id).content == content
        deadline = time.monotonic() + 5
        while (
            requests_counted(server, "/v1/files") < files_before + NUM_ROUNDS and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        time.sleep(0.2)  # a second count would have arrived by now (the workers send theirs every 50 ms)
        assert requests_counted(server, "/v1/files") == files_before + NUM_ROUNDS
        log = server.log()
        assert "forwarded to API worker 0: 200" in log, log  # the other worker answered through worker 0
        # 3. worker 0 killed: the other answers 503 with Retry-After, naming why, until it is replaced
        match = re.search(r"API worker 0 \(pid (\d+)\) runs the Batch API", log)
        assert match is not None, log
        owner = int(match.group(1))
        os.kill(owner, signal.SIGKILL)
        while not gone(owner):
            time.sleep(0.01)
        refused = httpx.get(f"{server.url}/v1/batches", timeout=TIMEOUT)
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["code"] == "batch_owner_unavailable"
        assert "API worker 0" in refused.json()["error"]["message"]
        deadline = time.monotonic() + TIMEOUT
        while httpx.get(f"{server.url}/v1/batches", timeout=TIMEOUT).status_code != 200:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        # 4. its replacement runs the same folder's batches; then a graceful stop
        for _ in range(NUM_ROUNDS):
            assert client.batches.retrieve(batch.id) == batch
        assert len(re.findall(r"API worker 0 \(pid \d+\) runs the Batch API", server.log())) == 2
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() == 0, server.log()
