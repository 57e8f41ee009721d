"""A dead engine: 503 without Retry-After, and ``wde serve`` exits 1 for its supervisor; a wedged forward
pass: /health 503 naming it, 200 again once it ends."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from server.observability.engine_monitor import EngineMonitor
from tests.hanging_forward import MARKER, HangingForward
from tests.server.conftest import asgi_client, wait_for
from tests.server.fake_engine import FakeEngine
from tests.server.serve_process import serve_process
from wde import EngineArgs
from wde.engine.llm_engine import LLMEngine
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineDeadError

TIMEOUT = 60.0
GRACEFUL_TIMEOUT = 3.0


@pytest.fixture
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def dead_engine(fake: FakeEngine) -> Iterator[AsyncLLMEngine]:
    """A started engine whose loop crashes on its first step."""
    engine = AsyncLLMEngine(EngineArgs(), build_engine=lambda: fake)
    engine.start()
    engine.wait_until_ready(TIMEOUT)
    fake.step_error = RuntimeError("device lost")
    yield engine
    engine.shutdown(TIMEOUT)


@pytest.mark.anyio
async def test_a_dead_engine_answers_503_without_retry_after(dead_engine: AsyncLLMEngine) -> None:
    async with asgi_client(dead_engine) as (client, _):
        dying = await client.post("/embed", json={"inputs": "a"})
        after = await client.post("/v1/embeddings", json={"input": "b"})
        health = await client.get("/health")
    for response in (dying, after, health):
        assert response.status_code == 503 and "retry-after" not in response.headers
    assert "device lost" in dying.json()["error"] and dying.json()["error_type"] == "Unhealthy"
    assert after.json()["error"]["code"] == "engine_dead"
    assert "the engine is dead" in health.json()["error"] and "restarted" in health.json()["error"]


@pytest.mark.anyio
@pytest.mark.parametrize("exit_on_failure", [True, False])
async def test_the_monitor_stops_the_server_when_the_engine_dies(
    dead_engine: AsyncLLMEngine, exit_on_failure: bool
) -> None:
    server = SimpleNamespace(should_exit=False)
    monitor = EngineMonitor(dead_engine, server, exit_on_failure, max_batch_seconds=300.0)
    monitor.start()
    with pytest.raises(EngineDeadError, match="device lost"):
        await dead_engine.encode(["a"])
    await asyncio.to_thread(monitor._thread.join, TIMEOUT)
    assert not monitor._thread.is_alive()
    assert server.should_exit is exit_on_failure and monitor.stopped_server.is_set() is exit_on_failure


@pytest.fixture(scope="module")
def hanging() -> Iterator[tuple[AsyncLLMEngine, list[HangingForward]]]:
    """A real engine of its own whose forward blocks on marked input until the test releases it."""
    forwards: list[HangingForward] = []
    args = EngineArgs(executor="async")

    def build() -> LLMEngine:
        engine = LLMEngine.from_engine_args(args)
        forwards.append(HangingForward.install(engine))
        return engine

    engine = AsyncLLMEngine(args, build_engine=build)
    engine.start()
    engine.wait_until_ready(TIMEOUT)
    yield engine, forwards
    for forward in forwards:
        forward.release.set()
    engine.shutdown(TIMEOUT)


@pytest.mark.anyio
async def test_health_is_503_while_a_forward_pass_runs_past_the_limit(
    hanging: tuple[AsyncLLMEngine, list[HangingForward]],
) -> None:
    engine, (forward,) = hanging
    async with asgi_client(engine, max_batch_seconds=1.0) as (client, _):
        assert (await client.get("/health")).status_code == 200
        stuck = asyncio.create_task(client.post("/embed", json={"inputs": f"a {MARKER} input"}))
        try:
            await wait_for(forward.hanging.is_set, TIMEOUT, "the marked forward pass")
            await wait_for(lambda: engine.running_forward_seconds > 1.2, TIMEOUT, "the limit to pass")
            health = await client.get("/health")
        finally:
            forward.release.set()
        answer = await stuck
        recovered = await client.get("/health")
    assert health.status_code == 503
    message = health.json()["error"]
    assert "a forward pass has run for" in message and "--max-batch-seconds 1" in message
    assert "wedged" in message
    assert answer.status_code == 200 and recovered.status_code == 200


KILLABLE_SERVE = """
import sys
from wde.engine.llm_engine import LLMEngine

original_step = LLMEngine.step

def step(self):
    if any(request.text == "kill the engine" for request in self.requests.values()):
        raise RuntimeError("the engine loop was killed on purpose")
    return original_step(self)

LLMEngine.step = step
from server.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a real `wde serve` process
def test_serve_exits_1_soon_after_the_engine_dies(tmp_path: Path) -> None:
    command = [sys.executable, "-c", KILLABLE_SERVE]
    args = ("--graceful-timeout", str(GRACEFUL_TIMEOUT))
    with serve_process(tmp_path, *args, command=command, env={"WDE_LOG_LEVEL": "info"}) as server:
        server.wait_healthy(TIMEOUT)
        url = server.url
        assert httpx.post(f"{url}/embed", json={"inputs": "fine"}, timeout=TIMEOUT).status_code == 200
        killed = httpx.post(f"{url}/embed", json={"inputs": "kill the engine"}, timeout=TIMEOUT)
        died_at = time.monotonic()
        assert killed.status_code == 503 and "killed on purpose" in killed.json()["error"]
        assert "retry-after" not in killed.headers
        status = server.wait(TIMEOUT)
        exited_after = time.monotonic() - died_at
        log_text = server.log()
    assert status == 1, log_text
    assert exited_after < GRACEFUL_TIMEOUT + 5.0, log_text
    assert "stopping the server (exit status 1) for a restart" in log_text
