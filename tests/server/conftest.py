"""Server test fixtures: ONE AsyncLLMEngine with the bundled model for the session, apps over it."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from server.app import create_app
from server.app_state import AppState
from server.engine_link.linked_metrics import LinkedMetrics
from server.launch.uvicorn_options import uvicorn_options
from server.settings import ServerSettings
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

TEXTS = ["hello world", "Debian package descriptions are short", "a", "x " * 600]
LONG_TEXT = "word " * 300  # 256 tokens after truncation: a full-length input
TOLERANCE = 1e-5


# "local": the engine on a thread of this process (`wde serve --api-workers 1`); "linked": the engine in an
# engine process and this process an API worker over it (`--api-workers 2` and more). The default suite runs
# the server suites over both; WDE_TEST_ENGINES=local (or linked) runs one.
ENGINE_MODES = tuple(os.environ.get("WDE_TEST_ENGINES", "local,linked").split(","))
# suites where the engine's process does not matter (Ray Serve's replicas, the load generator): local only
LOCAL_ONLY_MODULES = frozenset({"test_ray_serve.py", "test_bench_load.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in LOCAL_ONLY_MODULES and "[linked" in item.name:
            item.add_marker(pytest.mark.skip(reason="the engine's process does not matter to this suite"))


@pytest.fixture(scope="session", params=ENGINE_MODES)
def async_engine(request: pytest.FixtureRequest) -> Iterator[AsyncLLMEngine]:
    if request.param == "linked":
        from tests.server.linked_engine import engine_process_over

        with engine_process_over([EngineArgs()]) as (_, (engine,)):
            yield engine
        return
    engine = AsyncLLMEngine(EngineArgs())
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield engine
    engine.shutdown(timeout=60)


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random one-label cross-encoder (BertForSequenceClassification) in HF layout."""
    from tests.tiny_models import SEED, save_tiny_bert  # torch: only for the tests that use it

    return save_tiny_bert(
        tmp_path_factory.mktemp("server-ce"),
        seed=SEED + 20,
        architecture="BertForSequenceClassification",
        num_labels=1,
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def app_over(engine: AsyncLLMEngine, settings: ServerSettings) -> Any:
    """A fresh app over ``engine``; over a linked engine, an API worker's app (its metrics are the engine
    process's: one registry for the session, so tests compare counts before and after)."""
    from tests.server.linked_engine import link_of

    link = link_of(engine)
    return create_app(engine, settings, metrics=None if link is None else LinkedMetrics(link))


@asynccontextmanager
async def asgi_client(
    engine: AsyncLLMEngine, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, AppState]]:
    """An httpx client on a fresh app over ``engine`` (no lifespan: the engine is the caller's)."""
    app = app_over(engine, ServerSettings(**settings))
    state: AppState = app.state.wde
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://wde.test", timeout=60) as client:
            yield client, state
    finally:
        state.detach()


@asynccontextmanager
async def served_model(path: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An engine over the model folder ``path`` (CPU), ready, and an httpx client on an app over it; the
    engine shut down afterwards."""
    engine = AsyncLLMEngine(EngineArgs(model=str(path), device="cpu"))
    engine.start()
    engine.wait_until_ready(timeout=120)
    try:
        async with asgi_client(engine, **settings) as (client, _):
            yield client
    finally:
        engine.shutdown(timeout=60)


async def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition`` on the event loop (tests only; bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def max_abs_diff(got: Any, expected: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float32) - expected).max())


def reference(llm: Any, texts: list[Any], **kwargs: Any) -> np.ndarray:
    return np.stack([output.embedding for output in llm.encode(texts, **kwargs)])


@dataclass
class LiveServer:
    url: str
    port: int


@contextmanager
def live_uvicorn(
    engine: AsyncLLMEngine, settings: ServerSettings, timeout: float = 60.0
) -> Iterator[LiveServer]:
    """A real uvicorn on 127.0.0.1 (random free port, in a thread) over ``engine``, which outlives it."""
    app = app_over(engine, settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", **uvicorn_options(settings))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", port)
    finally:
        server.should_exit = True
        thread.join(timeout)
        app.state.wde.detach()
        sock.close()
