"""The loaded server's heap is kept out of full garbage collections (``server/process/heap_freeze.py``):
freezing moves the objects alive into the permanent generation and collects less often while frozen
(``SERVING_THRESHOLDS``), thawing undoes both; a registry that freezes does it on each engine
thread once the model is built (before it reports ready), and thaws once it unloaded a model for another
and when it shuts down;
a registry that does not freeze (the default: in-process use) never touches the collector."""

from __future__ import annotations

import asyncio
import gc
import threading
from types import SimpleNamespace
from typing import Any

import pytest

import server.process.heap_freeze as heap_freeze
import server.served_models.model_registry as model_registry
from server.served_models.model_registry import ModelRegistry, ServedModel
from server.served_models.swap_policy import SwapTiming
from tests.server.fake_engine import FakeEngine
from wde import EngineArgs

TIMEOUT = 30.0


def test_freezing_moves_the_live_objects_out_of_collections_and_thawing_back() -> None:
    assert gc.get_freeze_count() == 0
    kept = [[i] for i in range(1000)]  # tracked containers, alive
    thresholds = gc.get_threshold()
    try:
        heap_freeze.freeze_heap()
        assert gc.get_freeze_count() >= len(kept)
        assert all(generation_count == 0 for generation_count in gc.get_count()[1:])
        assert gc.get_threshold() == heap_freeze.SERVING_THRESHOLDS
        heap_freeze.freeze_heap()  # a second model loaded: still the serving thresholds
        assert gc.get_threshold() == heap_freeze.SERVING_THRESHOLDS
    finally:
        heap_freeze.thaw_heap()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


class RecordingCollector:
    """Stands in for ``gc`` in ``server.process.heap_freeze``: records what is done, and on which thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.thresholds = (700, 10, 10)

    def get_threshold(self) -> tuple[int, int, int]:
        return self.thresholds

    def set_threshold(self, young: int, middle: int, old: int) -> None:
        self.thresholds = (young, middle, old)

    def _record(self, what: str) -> None:
        self.events.append((what, threading.current_thread().name))

    def collect(self) -> int:
        self._record("collect")
        return 0

    def freeze(self) -> None:
        self._record("freeze")

    def unfreeze(self) -> None:
        self._record("thaw")

    def get_freeze_count(self) -> int:
        return 0


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> RecordingCollector:
    """The registry's own engine building (no ``make_engine``) over stand-in LLMEngines."""
    recording = RecordingCollector()
    monkeypatch.setattr(heap_freeze, "gc", recording)

    def build(*_: Any) -> FakeEngine:
        assert threading.current_thread().name == "wde-engine"
        return FakeEngine()

    monkeypatch.setattr(
        model_registry, "LLMEngine", SimpleNamespace(from_engine_args=build, from_engine_config=build)
    )
    return recording


def served(name: str) -> ServedModel:
    return ServedModel(EngineArgs(model=f"/models/{name}", served_model_name=name))


@pytest.mark.anyio
async def test_each_load_freezes_on_its_engine_thread_and_an_unload_thaws_first(
    collector: RecordingCollector,
) -> None:
    models = ModelRegistry([served("a"), served("b")], 1, swap_timing=SwapTiming(0.0, 0.0), freeze_heap=True)
    models.start()
    try:
        await asyncio.to_thread(models.wait_until_ready, TIMEOUT)
        assert collector.events == [("collect", "wde-engine"), ("freeze", "wde-engine")]
        assert collector.thresholds == heap_freeze.SERVING_THRESHOLDS
        async with models.use("b") as model:  # a is unloaded (then thawed), b loads (frozen)
            assert model.engine is not None and model.engine.is_ready
        assert [what for what, _ in collector.events] == ["collect", "freeze", "thaw", "collect", "freeze"]
        assert all(thread == "wde-engine" for what, thread in collector.events if what == "freeze")
    finally:
        await asyncio.to_thread(models.shutdown)
    assert collector.events[-1][0] == "thaw"  # stopped: nothing stays frozen
    assert collector.thresholds == (700, 10, 10)


@pytest.mark.anyio
async def test_a_registry_that_does_not_freeze_leaves_the_collector_alone(
    collector: RecordingCollector,
) -> None:
    models = ModelRegistry([served("a"), served("b")], 1, swap_timing=SwapTiming(0.0, 0.0))
    models.start()
    try:
        async with models.use("b"):
            pass
        assert collector.events == []
    finally:
        await asyncio.to_thread(models.shutdown)
