"""Batch input lines are split on "\n" only: a request whose text holds U+2028, U+2029 or U+0085 unescaped
(JSON allows them; orjson and ``json.dumps(ensure_ascii=False)`` write them as they are) stays one line,
runs, and keeps its custom_id and the line numbers after it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from server.batches.input_lines import LineError, LineRequest, read_lines
from tests.server.batches.test_batch_api import batch_client, embedding_line, run_batch, vectors
from tests.server.conftest import TOLERANCE
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio

BREAKS = ["one\u2028two", "three\u2029four", "five\u0085six", "seven\x1cand\x1d\x1eeight"]


def _unescaped(lines: list[dict[str, object]], end: str = "\n") -> bytes:
    return "".join(json.dumps(line, ensure_ascii=False) + end for line in lines).encode()


@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_unicode_line_breaks_stay_in_their_line(end: str) -> None:
    lines = [embedding_line(f"r{i}", {"input": text}) for i, text in enumerate(BREAKS)]
    lines.append({"custom_id": "bad", "method": "GET", "url": "/v1/embeddings", "body": {}})
    entries = read_lines(_unescaped(lines, end), "/v1/embeddings")
    assert [entry.custom_id for entry in entries] == ["r0", "r1", "r2", "r3", "bad"]
    assert [entry.line for entry in entries] == [1, 2, 3, 4, 5]
    assert all(isinstance(entry, LineRequest) for entry in entries[:4])
    assert [entry.body["input"] for entry in entries[:4]] == BREAKS  # type: ignore[union-attr]
    assert isinstance(entries[4], LineError) and entries[4].code == "invalid_method"


async def test_a_u2028_line_runs_and_keeps_its_custom_id(
    async_engine: AsyncLLMEngine, tmp_path: Path
) -> None:
    bodies = [{"input": text} for text in BREAKS]
    content = _unescaped([embedding_line(f"r{i}", body) for i, body in enumerate(bodies)])
    async with batch_client(async_engine, tmp_path) as (client, http):
        batch = await run_batch(client, content, "/v1/embeddings")
        assert batch.status == "completed" and batch.error_file_id is None, batch
        assert batch.request_counts.model_dump() == {"total": 4, "completed": 4, "failed": 0}
        text = (await client.files.content(batch.output_file_id)).text
        output = [json.loads(line) for line in text.split("\n") if line]
        assert [record["custom_id"] for record in output] == ["r0", "r1", "r2", "r3"]
        for record, body in zip(output, bodies, strict=True):
            live = (await http.post("/v1/embeddings", json=body)).json()
            got = record["response"]["body"]
            assert np.abs(vectors(got) - vectors(live)).max() <= TOLERANCE
