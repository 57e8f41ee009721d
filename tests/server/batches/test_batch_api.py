"""The OpenAI Batch API (/v1/files, /v1/batches) through the unmodified openai SDK, on the bundled model:
each line's answer equals the live route's (/v1/embeddings, /v1/rerank), malformed lines and refused bodies
go to the error file, cancel keeps what was answered, and an interrupted batch resumes without running its
answered lines again. The 2,000-line real-text run with a real `wde serve` restart is in
test_batch_restart.py; interactive latency while a batch runs in test_batch_latency.py."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from openai import AsyncOpenAI

from server.app import create_app
from server.settings import ServerSettings
from tests.server.conftest import TOLERANCE
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import Call
from wde.request import PRIORITY_BATCH, PRIORITY_INTERACTIVE, priority

pytestmark = pytest.mark.anyio

FINISHED = ("completed", "failed", "cancelled", "expired")
DOCUMENTS = ["Debian is a free operating system.", "A pastry with cream.", "Linux kernel and GNU tools."]


# ---- helpers (also used by test_batch_restart.py and test_batch_latency.py) ----------------------------
def jsonl(lines: list[Any]) -> bytes:
    return b"".join((line if isinstance(line, str) else json.dumps(line)).encode() + b"\n" for line in lines)


def embedding_line(custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body}


def rerank_line(custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/rerank", "body": body}


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def vectors(body: dict[str, Any]) -> np.ndarray:
    """The embeddings of a /v1/embeddings answer, float lists or base64 little-endian float32."""
    rows = []
    for item in body["data"]:
        embedding = item["embedding"]
        if isinstance(embedding, str):
            embedding = np.frombuffer(base64.b64decode(embedding), dtype="<f4")
        rows.append(np.asarray(embedding, dtype=np.float32))
    return np.stack(rows)


@asynccontextmanager
async def batch_client(
    engine: AsyncLLMEngine, batch_dir: Path, **settings: Any
) -> AsyncIterator[tuple[AsyncOpenAI, httpx.AsyncClient]]:
    """The openai SDK (and plain httpx) on a fresh app over ``engine`` with its batch runner started (the
    app's lifespan would also start and stop the engine, which the session shares)."""
    app = create_app(engine, ServerSettings(batch_dir=str(batch_dir), **settings))
    await app.state.batches.start()
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://wde.test", timeout=60) as http:
            yield AsyncOpenAI(base_url="http://wde.test/v1", api_key="unused", http_client=http), http
    finally:
        await app.state.batches.stop()
        app.state.wde.detach()


async def run_batch(client: AsyncOpenAI, content: bytes, endpoint: str, timeout: float = 120.0) -> Any:
    """Upload, create, poll until finished (bounded); the final batch object."""
    uploaded = await client.files.create(file=("requests.jsonl", content), purpose="batch")
    batch = await create_batch(client, uploaded.id, endpoint)
    return await wait_finished(client, batch.id, timeout)


async def create_batch(client: AsyncOpenAI, file_id: str, endpoint: str = "/v1/embeddings") -> Any:
    return await client.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")


async def wait_finished(client: AsyncOpenAI, batch_id: str, timeout: float = 120.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in FINISHED:
            return batch
        assert loop.time() < deadline, f"batch {batch_id} still {batch.status} after {timeout} s"
        await asyncio.sleep(0.05)


async def file_records(client: AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return records((await client.files.content(file_id)).text)


# ---- the answers equal the live routes' -----------------------------------------------------------------
async def test_embedding_batch_equals_v1_embeddings(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    bodies = [
        {"input": "What is Debian?", "model": "text-embedding-3-small"},
        {"input": ["a", "Debian package descriptions are short", ""], "encoding_format": "float"},
        {"input": ["Matryoshka vectors"], "dimensions": 128},
        {"input": ["base64 as the SDK asks"], "encoding_format": "base64"},
        {"input": [[101, 7592, 2088, 102]]},  # token ids
        *({"input": f"line number {i} " * (i % 7 + 1)} for i in range(30)),
    ]
    content = jsonl([embedding_line(f"e{i}", body) for i, body in enumerate(bodies)])
    async with batch_client(async_engine, tmp_path) as (client, http):
        batch = await run_batch(client, content, "/v1/embeddings")
        assert batch.status == "completed", batch
        num = len(bodies)
        assert batch.request_counts.model_dump() == {"total": num, "completed": num, "failed": 0}
        assert batch.error_file_id is None and batch.errors is None
        assert batch.model == "sentence-transformers/all-MiniLM-L6-v2"
        assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
        output = await file_records(client, batch.output_file_id)
        assert [record["custom_id"] for record in output] == [f"e{i}" for i in range(len(bodies))]
        num_tokens = 0
        for record, body in zip(output, bodies, strict=True):
            assert record["id"].startswith("batch_req_") and record["error"] is None
            assert record["response"]["status_code"] == 200
            assert record["response"]["request_id"].startswith("req_")
            live = (await http.post("/v1/embeddings", json=body)).json()
            got = record["response"]["body"]
            assert got["usage"] == live["usage"] and got["model"] == live["model"]
            assert np.abs(vectors(got) - vectors(live)).max() <= TOLERANCE
            num_tokens += got["usage"]["total_tokens"]
        assert batch.usage is not None and batch.usage.total_tokens == num_tokens
        # the output file is a file object like any other
        output_file = await client.files.retrieve(batch.output_file_id)
        assert output_file.purpose == "batch_output" and output_file.bytes > 0


async def test_rerank_batch_equals_v1_rerank(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    bodies = [
        {"query": "What is Debian?", "documents": DOCUMENTS},
        {"query": "dessert", "documents": DOCUMENTS, "top_n": 2, "return_documents": True},
        {"query": "kernel", "documents": [{"text": d} for d in DOCUMENTS], "model": "rerank-v3.5"},
        {"query": "cut documents", "documents": DOCUMENTS, "max_tokens_per_doc": 3},
    ]
    content = jsonl([rerank_line(f"r{i}", body) for i, body in enumerate(bodies)])
    async with batch_client(async_engine, tmp_path) as (client, http):
        batch = await run_batch(client, content, "/v1/rerank")
        assert batch.status == "completed" and batch.request_counts.completed == len(bodies)
        for record, body in zip(await file_records(client, batch.output_file_id), bodies, strict=True):
            live = (await http.post("/v1/rerank", json=body)).json()
            got = record["response"]["body"]
            assert [r["index"] for r in got["results"]] == [r["index"] for r in live["results"]]
            assert [r.get("document") for r in got["results"]] == [r.get("document") for r in live["results"]]
            scores = [r["relevance_score"] for r in got["results"]]
            assert np.allclose(scores, [r["relevance_score"] for r in live["results"]], atol=TOLERANCE)
            assert got["usage"] == live["usage"]


# ---- bad lines: each answered in the error file, the batch goes on -----------------------------------------
async def test_bad_lines_go_to_the_error_file(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    lines = [
        embedding_line("ok-1", {"input": "fine"}),
        "this is not json",
        {"method": "POST", "url": "/v1/embeddings", "body": {"input": "no custom_id"}},
        {"custom_id": "wrong-url", "method": "POST", "url": "/v1/chat/completions", "body": {"input": "x"}},
        {"custom_id": "wrong-method", "method": "GET", "url": "/v1/embeddings", "body": {"input": "x"}},
        embedding_line("ok-1", {"input": "a duplicate custom_id"}),
        embedding_line("empty", {"input": []}),
        embedding_line("bad-format", {"input": "x", "encoding_format": "hex"}),
        embedding_line("too-many", {"input": ["x"] * 5}),
        embedding_line("bad-dimensions", {"input": "x", "dimensions": 100_000}),
        embedding_line("ok-2", {"input": ["also fine"]}),
        "",  # a blank line is no request
    ]
    async with batch_client(async_engine, tmp_path, max_client_batch_size=4) as (client, _):
        batch = await run_batch(client, jsonl(lines), "/v1/embeddings")
        assert batch.status == "completed"
        assert batch.request_counts.model_dump() == {"total": 11, "completed": 2, "failed": 9}
        output = await file_records(client, batch.output_file_id)
        assert [record["custom_id"] for record in output] == ["ok-1", "ok-2"]
        errors = await file_records(client, batch.error_file_id)
    # malformed lines: no response, an error naming the line; refused bodies: the route's own answer
    by_line = {record["custom_id"]: record for record in errors if record["custom_id"] is not None}
    codes = [record["error"]["code"] for record in errors if record["error"] is not None]
    assert codes == [
        "invalid_json_line",
        "missing_custom_id",
        "invalid_url",
        "invalid_method",
        "duplicate_custom_id",
    ]
    assert "line 2" in errors[0]["error"]["message"] and errors[0]["response"] is None
    assert by_line["wrong-url"]["error"]["message"].endswith("but this batch's endpoint is '/v1/embeddings'")
    refused = ("empty", "bad-format", "too-many")
    statuses = {name: by_line[name]["response"]["status_code"] for name in refused}
    assert statuses == {"empty": 422, "bad-format": 422, "too-many": 413}
    assert by_line["empty"]["response"]["body"]["error"]["param"] == "input"
    assert "--max-client-batch-size (4)" in by_line["too-many"]["response"]["body"]["error"]["message"]
    assert by_line["bad-dimensions"]["response"]["status_code"] in (400, 422)


async def test_an_empty_file_fails_the_batch(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    async with batch_client(async_engine, tmp_path) as (client, _):
        batch = await run_batch(client, b"\n  \n", "/v1/embeddings")
    assert batch.status == "failed" and batch.failed_at is not None
    assert batch.errors is not None and batch.errors.data[0].code == "empty_file"


# ---- the routes' own refusals ----------------------------------------------------------------------------
async def test_routes_refuse_what_they_cannot_serve(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    async with batch_client(async_engine, tmp_path) as (client, http):
        with pytest.raises(openai.UnprocessableEntityError, match="purpose"):
            await client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
        with pytest.raises(openai.NotFoundError, match="no file 'file-missing'"):
            await client.batches.create(
                input_file_id="file-missing", endpoint="/v1/embeddings", completion_window="24h"
            )
        uploaded = await client.files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
        with pytest.raises(openai.UnprocessableEntityError, match="endpoint"):
            await client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
        with pytest.raises(openai.UnprocessableEntityError, match="completion_window"):
            await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/embeddings",
                completion_window="1h",  # type: ignore[arg-type]
            )
        with pytest.raises(openai.NotFoundError, match="GET /v1/batches lists them"):
            await client.batches.retrieve("batch_unknown")
        with pytest.raises(openai.NotFoundError):
            await client.files.content("file-unknown")
        assert (await http.get("/v1/files/..%2F..%2Fetc%2Fpasswd")).status_code == 404
        json_body = {"Content-Type": "application/json"}
        missing_form = await http.post("/v1/files", content=b"{}", headers=json_body)
        assert missing_form.status_code == 422 and "multipart/form-data" in missing_form.text
        assert (await client.files.retrieve(uploaded.id)).filename == "x.jsonl"
        assert [item.id for item in (await client.files.list()).data] == [uploaded.id]


async def test_list_pages_newest_first(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    content = jsonl([embedding_line("only", {"input": "x"})])
    async with batch_client(async_engine, tmp_path) as (client, _):
        ids = [(await run_batch(client, content, "/v1/embeddings")).id for _ in range(3)]
        page = await client.batches.list(limit=2)
        assert page.has_more and len(page.data) == 2
        every = [batch.id async for batch in client.batches.list(limit=2)]  # the SDK follows the cursor
    assert sorted(every) == sorted(ids) and len(every) == 3


# ---- cancel ----------------------------------------------------------------------------------------------
async def test_cancel_keeps_what_was_answered(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    lines = [embedding_line(f"c{i}", {"input": [f"document {i} " * 40] * 4}) for i in range(400)]
    async with batch_client(async_engine, tmp_path, batch_lines_in_flight=2) as (client, _):
        uploaded = await client.files.create(file=("big.jsonl", jsonl(lines)), purpose="batch")
        batch = await create_batch(client, uploaded.id)
        while (batch := await client.batches.retrieve(batch.id)).request_counts.completed < 3:
            assert batch.status in ("validating", "in_progress"), batch
            await asyncio.sleep(0.02)
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
        batch = await wait_finished(client, batch.id)
        assert batch.status == "cancelled" and batch.cancelled_at is not None
        counts = batch.request_counts
        output = await file_records(client, batch.output_file_id)
        assert 3 <= counts.completed == len(output) < counts.total == 400 and counts.failed == 0
        answered = [int(record["custom_id"][1:]) for record in output]
        assert answered == sorted(answered) and answered[:2] == [0, 1]  # in input order
        with pytest.raises(openai.ConflictError, match="only validating or in_progress"):
            await client.batches.cancel((await run_batch(client, jsonl(lines[:1]), "/v1/embeddings")).id)
        assert (await client.batches.cancel(batch.id)).status == "cancelled"  # again: no change
    await _engine_idle(async_engine)  # the aborted lines left nothing in the engine


async def test_cancel_a_queued_batch(async_engine: AsyncLLMEngine, tmp_path: Path) -> None:
    lines = [embedding_line(f"q{i}", {"input": [f"document {i} " * 40] * 4}) for i in range(200)]
    async with batch_client(async_engine, tmp_path, batch_lines_in_flight=2) as (client, _):
        uploaded = await client.files.create(file=("q.jsonl", jsonl(lines)), purpose="batch")
        running = await create_batch(client, uploaded.id)
        queued = await create_batch(client, uploaded.id)
        cancelled = await client.batches.cancel(queued.id)  # its turn has not come: cancelled at once
        assert cancelled.status == "cancelled" and cancelled.request_counts.completed == 0
        assert cancelled.output_file_id is None
        await client.batches.cancel(running.id)
        assert (await wait_finished(client, running.id)).status == "cancelled"
    await _engine_idle(async_engine)


async def _engine_idle(engine: AsyncLLMEngine, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while engine.num_unfinished:
        assert loop.time() < deadline, f"{engine.num_unfinished} requests left in the engine"
        await asyncio.sleep(0.02)


# ---- an interrupted batch resumes ----------------------------------------------------------------------
async def test_a_stopped_batch_resumes_without_running_answered_lines(
    async_engine: AsyncLLMEngine, tmp_path: Path
) -> None:
    bodies = [{"input": [f"resumable line {i} " * 10]} for i in range(120)]
    content = jsonl([embedding_line(f"s{i}", body) for i, body in enumerate(bodies)])
    # 1. a server that stops mid-batch (its lines in flight aborted, not answered)
    async with batch_client(async_engine, tmp_path, batch_lines_in_flight=1) as (client, _):
        uploaded = await client.files.create(file=("s.jsonl", content), purpose="batch")
        batch = await create_batch(client, uploaded.id)
        while (await client.batches.retrieve(batch.id)).request_counts.completed < 10:
            await asyncio.sleep(0.02)
    progress = tmp_path / "batches" / f"{batch.id}.progress"
    answered = {json.loads(line)["record"]["id"] for line in progress.read_text().splitlines()}
    assert 10 <= len(answered) < len(bodies)
    with progress.open("ab") as f:
        f.write(b'{"line": 99, "ok": tr')  # a crash mid-write: the torn line is dropped and re-run
    # 2. a new server over the same folder: the batch resumes and completes
    async with batch_client(async_engine, tmp_path) as (client, http):
        resumed = await client.batches.retrieve(batch.id)
        assert resumed.status in ("in_progress", "completed") and resumed.request_counts.total == len(bodies)
        batch = await wait_finished(client, batch.id)
        assert batch.status == "completed" and batch.request_counts.completed == len(bodies)
        output = await file_records(client, batch.output_file_id)
        assert [record["custom_id"] for record in output] == [f"s{i}" for i in range(len(bodies))]
        assert answered <= {record["id"] for record in output}  # answered before the stop: not run again
        live = (await http.post("/v1/embeddings", json=bodies[-1])).json()
        assert np.abs(vectors(output[-1]["response"]["body"]) - vectors(live)).max() <= TOLERANCE
    assert not progress.exists()  # finalized: the output file holds it all


async def test_one_process_per_batch_dir_runs_its_batches(
    async_engine: AsyncLLMEngine, tmp_path: Path
) -> None:
    """Two servers over one --batch-dir (two `wde serve` on one machine, Ray Serve replicas) would both resume
    and run the same batches: the second gets no Batch API (503 naming the flag) until the first stops."""
    async with batch_client(async_engine, tmp_path) as (client, _):
        await client.files.create(
            file=("a.jsonl", jsonl([embedding_line("a", {"input": "a"})])), purpose="batch"
        )
        async with batch_client(async_engine, tmp_path) as (_, second):
            refused = await second.get("/v1/files")
            assert refused.status_code == 503 and "retry-after" not in refused.headers
            assert "--batch-dir" in refused.json()["error"]["message"]
            assert (await second.post("/v1/embeddings", json={"input": "still served"})).status_code == 200
    async with batch_client(async_engine, tmp_path) as (client, _):  # the first stopped: the folder is free
        assert len((await client.files.list()).data) == 1


# ---- priority: what a batch line submits waits for interactive requests ---------------------------------
async def test_submissions_inside_priority_carry_it() -> None:
    loop = asyncio.get_running_loop()
    assert Call([], [], None, loop, loop.create_future()).priority == PRIORITY_INTERACTIVE
    with priority(PRIORITY_BATCH):
        assert Call([], [], None, loop, loop.create_future()).priority == PRIORITY_BATCH
    assert Call([], [], None, loop, loop.create_future()).priority == PRIORITY_INTERACTIVE
