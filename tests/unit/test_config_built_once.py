"""``wde serve`` builds each model's ``EngineConfig`` once: the CLI checks the folders with it, the model
registry keeps it (names, tasks, the memory check) and the engine is made from it. Counted through the real
start-up path, in process, with uvicorn's loop replaced by a wait for the engines."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.cli import main
from server.launch.draining_server import DrainingServer
from tests.server.serve_process import free_port
from tests.tiny_models import save_tiny_bert
from wde.engine_args import EngineArgs
from wde.entrypoints.engine_thread import EngineState

LOAD_TIMEOUT = 120.0


@pytest.fixture
def kept_signal_handlers() -> Iterator[None]:
    """``wde serve`` installs its SIGTERM / SIGINT handlers: give pytest its own back."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def test_wde_serve_builds_each_models_config_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept_signal_handlers: None
) -> None:
    first = save_tiny_bert(tmp_path / "first")
    second = save_tiny_bert(tmp_path / "second", seed=1)
    # 1. count the builds, per model
    builds: Counter[str | None] = Counter()
    build = EngineArgs.create_engine_config

    def counting_build(self: EngineArgs) -> Any:
        builds[self.model] += 1
        return build(self)

    monkeypatch.setattr(EngineArgs, "create_engine_config", counting_build)
    # 2. instead of serving HTTP: wait until every engine is up (each built its LLMEngine), then stop them
    ready: list[str] = []

    def run_until_loaded(self: DrainingServer, sockets: Any = None) -> None:
        for model in self.state.models.loaded():
            model.engine.wait_until_ready(LOAD_TIMEOUT)
            assert model.engine.state == EngineState.READY
            ready.append(model.name)
        self.started = True
        self.state.models.shutdown()

    monkeypatch.setattr(DrainingServer, "run", run_until_loaded)
    status = main(["serve", str(first), str(second), "--port", str(free_port()), "--log-level", "warning"])
    assert status == 0
    assert ready == [str(first), str(second)]
    assert builds == {str(first): 1, str(second): 1}
