"""A real ``wde embed`` process killed with SIGKILL halfway, then restarted: the output stays readable
throughout, every id ends up there exactly once with ``LLM.encode``'s vector, and the restart re-embeds at
most the one chunk that was in flight (counted from the log: texts handed to the engine beyond the input)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.bulk.conftest import assert_equals_reference, read_output, write_jsonl
from wde.bulk.journal import Journal

pytestmark = [pytest.mark.slow, pytest.mark.shared_data]  # two real `wde embed` processes

CHUNK_SIZE = 8
NUM_PARTS_BEFORE_KILL = 4
TIMEOUT_SECONDS = 240


def wde_embed(source, out) -> list[str]:
    wde = os.path.join(os.path.dirname(sys.executable), "wde")
    return [wde, "embed", str(source), "--output", str(out), "--chunk-size", str(CHUNK_SIZE), "--no-progress"]


def test_sigkill_halfway_then_resume(tmp_path, docs, reference) -> None:
    source, out = write_jsonl(tmp_path / "docs.jsonl", docs), tmp_path / "out"
    num_chunks = -(-len(docs) // CHUNK_SIZE)
    # 1. start, and kill -9 once a few parts are on disk
    process = subprocess.Popen(wde_embed(source, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while len(list(out.glob("part-*.parquet"))) < NUM_PARTS_BEFORE_KILL:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no parts written in time"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stderr.close()
    num_parts_at_kill = len(list(out.glob("part-*.parquet")))
    assert NUM_PARTS_BEFORE_KILL <= num_parts_at_kill < num_chunks, "killed too late to test a resume"
    # 2. what the killed run left is a valid, readable output
    num_rows_at_kill = read_output(out).num_rows
    assert num_rows_at_kill == num_parts_at_kill * CHUNK_SIZE
    # 3. the same command again finishes the job
    finished = subprocess.run(wde_embed(source, out), capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    assert finished.returncode == 0, finished.stderr
    assert f"{num_rows_at_kill:,} were already written" in finished.stdout
    assert_equals_reference(read_output(out), [doc["id"] for doc in docs], reference)
    assert not list(out.glob(".tmp-*"))
    # 4. the log: two runs, the second resuming from the killed one's parts; at most one chunk embedded twice
    events = Journal.read(out)
    runs = [event for event in events if event["event"] == "run"]
    assert [run["num_done"] for run in runs] == [0, num_rows_at_kill]
    num_texts_begun = sum(event["num_texts"] for event in events if event["event"] == "begin")
    num_reembedded = num_texts_begun - len(docs)
    assert 0 <= num_reembedded <= CHUNK_SIZE
    assert events[-1]["event"] == "finished"
