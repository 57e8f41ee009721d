"""Interactive ``POST /embed`` latency on a real ``wde serve``, idle and while a 2,000-line batch of real text
(../shared/data/docs.jsonl) runs. Batch lines run at batch priority, so a waiting interactive request goes
first and waits at most for the forward pass already running (a short one while interactive requests keep
arriving). The test asserts correctness only: the answers during the batch equal the idle ones, and the
batch made progress meanwhile. It prints the p50 / p95 figures (run with -s); README quotes them. Not a
timed assertion: figures on a shared 2-core machine vary."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from openai import OpenAI

from tests.server.batches.test_batch_api import embedding_line, jsonl
from tests.server.batches.test_batch_restart import poll
from tests.server.conftest import TOLERANCE
from tests.server.serve_process import serve_process
from tests.shared_data import read_texts

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]  # a real server, ~20 s

NUM_BATCH_LINES = 2000
NUM_QUERIES = 60
NUM_WARMUP = 10
MIN_ANSWERED_BEFORE_MEASURING = 32


def timed_embeds(http: httpx.Client, queries: list[str]) -> tuple[list[float], list[list[float]]]:
    """Seconds and answer of each ``/embed`` of one query, one request after the other."""
    seconds, answers = [], []
    for query in queries:
        start = time.perf_counter()
        response = http.post("/embed", json={"inputs": query})
        seconds.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
        answers.append(response.json()[0])
    return seconds, answers


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def test_interactive_latency_while_a_batch_runs(tmp_path: Path) -> None:
    documents = read_texts("docs.jsonl", NUM_BATCH_LINES)  # skips, naming the file, without the data
    queries = read_texts("queries.jsonl", NUM_QUERIES + NUM_WARMUP)
    content = jsonl([embedding_line(f"doc-{i}", {"input": text}) for i, text in enumerate(documents)])
    with serve_process(tmp_path, "--batch-dir", str(tmp_path / "batches"), "--no-access-log") as server:
        server.wait_healthy()
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        with httpx.Client(base_url=server.url, timeout=60) as http:
            # 1. idle
            timed_embeds(http, queries[:NUM_WARMUP])
            idle, idle_answers = timed_embeds(http, queries[NUM_WARMUP:])
            # 2. while the batch runs
            uploaded = client.files.create(file=("docs.jsonl", content), purpose="batch")
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
            )
            before = poll(
                client, batch.id, lambda b: b.request_counts.completed >= MIN_ANSWERED_BEFORE_MEASURING
            )
            start = time.perf_counter()
            busy, busy_answers = timed_embeds(http, queries[NUM_WARMUP:])
            elapsed = time.perf_counter() - start
            after = client.batches.retrieve(batch.id)
            # 3. done: cancel the rest, then idle again (the machine's load drifts: idle on both sides)
            client.batches.cancel(batch.id)
            cancelled = poll(client, batch.id, lambda b: b.status == "cancelled", timeout=120)
            idle_after, idle_after_answers = timed_embeds(http, queries[NUM_WARMUP:])
    # the batch ran during the measurement, and the answers did not change
    assert before.status == after.status == "in_progress"
    num_batch_lines = after.request_counts.completed - before.request_counts.completed
    assert num_batch_lines > 0
    assert cancelled.request_counts.completed >= after.request_counts.completed
    expected = np.array(idle_answers, dtype=np.float32)
    for answers in (busy_answers, idle_after_answers):
        assert float(np.abs(np.array(answers, dtype=np.float32) - expected).max()) <= TOLERANCE
    idle += idle_after
    p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
    print(
        f"\n/embed p50 idle {p50_idle * 1000:.1f} ms (p95 {percentile(idle, 95) * 1000:.1f}), "
        f"while a batch runs {p50_busy * 1000:.1f} ms (p95 {percentile(busy, 95) * 1000:.1f}): "
        f"{p50_busy / p50_idle:.2f}x; the batch answered {num_batch_lines} lines "
        f"({num_batch_lines / elapsed:.1f} lines/s) during the {len(busy)} requests; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
