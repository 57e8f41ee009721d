"""A 500 tells the client what failed and a request id, never the exception (internals); the exception
goes to the log once, under that id: one server.error_answers record, and no second traceback from the
server for an unexpected exception."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import httpx
import pytest

from server.app import create_app
from server.error_answers import install_error_handlers
from tests.poisoned_forward import MARKER, PoisonedForward
from tests.server.conftest import asgi_client
from wde import EngineArgs
from wde.engine.llm_engine import LLMEngine
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

pytestmark = pytest.mark.anyio
REQUEST_ID = re.compile(r"\(request id (req_[0-9a-f]{16}); the server log has the details\)$")


@pytest.fixture(scope="module")
def poisoned_engine() -> Iterator[AsyncLLMEngine]:
    args = EngineArgs(max_num_batched_tokens=128)

    def build() -> LLMEngine:
        return PoisonedForward.install(LLMEngine.from_engine_args(args))

    engine = AsyncLLMEngine(args, build_engine=build)
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine
    engine.shutdown(timeout=60)


async def test_a_failed_forward_says_so_with_a_request_id_and_logs_the_error_once(
    poisoned_engine: AsyncLLMEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="server.error_answers")
    async with asgi_client(poisoned_engine, access_log=False) as (client, _):
        tei = await client.post("/embed", json={"inputs": ["fine", f"the {MARKER} input"]})
        openai = await client.post("/v1/embeddings", json={"input": [MARKER, "fine"]})
    for response, message in ((tei, tei.json()["error"]), (openai, openai.json()["error"]["message"])):
        assert (
            response.status_code == 500 and "RuntimeError" not in response.text and "poisoned" not in message
        )
        match = REQUEST_ID.search(message)
        assert match is not None and response.headers["x-request-id"] == match.group(1), message
    assert tei.json()["error"].startswith("inputs[1]: the forward pass failed for this input (request id")
    assert openai.json()["error"]["message"].startswith("input[0]: the forward pass failed for this input")
    records = [record for record in caplog.records if record.name == "server.error_answers"]
    assert len(records) == 2  # one per 500
    for record, response in zip(records, (tei, openai), strict=True):
        line = record.getMessage()
        assert response.headers["x-request-id"] in line and "RuntimeError('poisoned token" in line


async def test_an_unexpected_exception_is_a_plain_500_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from fastapi import FastAPI

    app = FastAPI()
    install_error_handlers(app, retry_after_seconds=1)

    @app.get("/boom")
    async def boom() -> None:
        raise KeyError("secret internal detail")

    caplog.set_level(logging.ERROR)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
        response = await client.get("/boom")
    assert response.status_code == 500 and "secret" not in response.text
    assert response.json()["error"].startswith("internal server error (request id req_")
    records = [record for record in caplog.records if record.name == "server.error_answers"]
    assert len(records) == 1 and "secret internal detail" in records[0].getMessage()
    assert records[0].exc_info is not None  # the traceback, in that one record
    # Starlette re-raised it for the server, which logs it again through uvicorn.error: dropped
    uvicorn_record = logging.LogRecord(
        "uvicorn.error",
        logging.ERROR,
        __file__,
        0,
        "Exception in ASGI application",
        None,
        records[0].exc_info,
    )
    assert not logging.getLogger("uvicorn.error").filter(uvicorn_record)


def test_create_app_installs_the_handlers(poisoned_engine: AsyncLLMEngine) -> None:
    app = create_app(poisoned_engine)
    try:
        assert Exception in app.exception_handlers
    finally:
        app.state.wde.detach()
