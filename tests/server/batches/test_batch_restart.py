"""A real ``wde serve`` killed mid-batch and started again over the same --batch-dir loses nothing: the
official openai SDK uploads 600 lines of real text (../shared/data/docs.jsonl), creates the batch, the
server is killed (SIGKILL) once some lines are answered, the next server resumes the batch without running
those lines again, and the output's embeddings equal the answers of /v1/embeddings."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import OpenAI

from tests.server.batches.test_batch_api import FINISHED, embedding_line, jsonl, records
from tests.server.conftest import TOLERANCE
from tests.server.serve_process import serve_process
from tests.shared_data import read_texts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.shared_data,
]  # two real servers, 600 documents embedded twice: about half a minute

NUM_LINES = 600
MIN_ANSWERED_BEFORE_KILL = 100
TIMEOUT = 600.0


def poll(client: OpenAI, batch_id: str, done: Any, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while not done(batch := client.batches.retrieve(batch_id)):
        assert time.monotonic() < deadline, f"batch {batch_id} is {batch.status} after {timeout} s"
        time.sleep(0.1)
    return batch


def test_a_killed_server_resumes_the_batch_and_loses_nothing(tmp_path: Path) -> None:
    texts = read_texts("docs.jsonl", NUM_LINES)  # skips, naming the file, without the shared data
    batch_dir = tmp_path / "batches"
    content = jsonl([embedding_line(f"doc-{i}", {"input": text}) for i, text in enumerate(texts)])
    # 1. the first server: upload, create, answer some lines, then killed without warning
    (tmp_path / "first").mkdir()
    with serve_process(tmp_path / "first", "--batch-dir", str(batch_dir)) as server:
        server.wait_healthy()
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        uploaded = client.files.create(file=("docs.jsonl", content), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
        )
        before = poll(client, batch.id, lambda b: b.request_counts.completed >= MIN_ANSWERED_BEFORE_KILL)
        server.process.kill()
        server.wait()
    assert before.status == "in_progress" and before.request_counts.total == NUM_LINES
    progress = batch_dir / "batches" / f"{batch.id}.progress"
    answered = {
        json.loads(line)["record"]["id"] for line in progress.read_bytes().splitlines() if line.endswith(b"}")
    }
    assert MIN_ANSWERED_BEFORE_KILL <= len(answered) < NUM_LINES
    # 2. the second server over the same folder resumes it
    (tmp_path / "second").mkdir()
    with serve_process(tmp_path / "second", "--batch-dir", str(batch_dir)) as server:
        server.wait_healthy()
        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        resumed = client.batches.retrieve(batch.id)
        assert resumed.status in ("in_progress", "finalizing", "completed")
        assert resumed.request_counts.completed >= len(answered)  # nothing answered was lost
        batch = poll(client, batch.id, lambda b: b.status in FINISHED)
        assert batch.status == "completed", batch
        assert batch.request_counts.model_dump() == {"total": NUM_LINES, "completed": NUM_LINES, "failed": 0}
        output = records(client.files.content(batch.output_file_id).text)
        live = client.embeddings.create(input=texts, model="any", encoding_format="float")
        assert f"batch {batch.id} resumes" in server.log()
        assert "objects out of the garbage collector's full collections" in server.log()  # heap_freeze.py
    # 3. every line answered once, those answered before the kill not again, and equal to /v1/embeddings
    assert [record["custom_id"] for record in output] == [f"doc-{i}" for i in range(NUM_LINES)]
    assert answered <= {record["id"] for record in output}
    got = np.array(
        [record["response"]["body"]["data"][0]["embedding"] for record in output], dtype=np.float32
    )
    expected = np.array([item.embedding for item in live.data], dtype=np.float32)
    assert float(np.abs(got - expected).max()) <= TOLERANCE
