"""--max-loaded-models swaps by queue (``server/served_models/swap_policy.py``): the loaded model serves its
own requests first, the model with the oldest queued request loads when the loaded one drains or once that
request has waited --max-swap-wait, a model that just loaded stays --min-model-residency, and mixed traffic of
two models through one slot loads about once per queue drain, not once per request (the bound on the wait, on
a virtual clock: ``test_swap_bound.py``)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

import pytest

from server.served_models.model_registry import ModelRegistry
from server.served_models.swap_policy import SwapTiming, plan_swap
from tests.server.fake_engine import FakeEngine
from tests.server.served_models.test_model_registry import served
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine

TIMEOUT = 60.0
LOAD_SECONDS = 0.05  # a fake engine's load


def slow_loading_engine(args: EngineArgs) -> AsyncLLMEngine:
    def build() -> FakeEngine:
        time.sleep(LOAD_SECONDS)  # the engine thread's model load
        return FakeEngine()

    return AsyncLLMEngine(args, build_engine=build)


def registry(*names: str, timing: SwapTiming, max_loaded_models: int = 1) -> ModelRegistry:
    return ModelRegistry(
        [served(name) for name in names], max_loaded_models, slow_loading_engine, swap_timing=timing
    )


# ---- the plan, on its own ------------------------------------------------------------------------------
@dataclass
class Model:
    name: str
    is_loaded: bool = False
    waiting: deque[float] = field(default_factory=deque)
    num_in_use: int = 0
    last_used: float = 0.0
    loaded_at: float = 0.0
    load_seconds: float = 0.0
    idle_since: float = 0.0


TIMING = SwapTiming(max_wait=2.0, min_residency=1.0)


def test_the_oldest_queued_request_picks_the_model_and_room_loads_it_at_once() -> None:
    a, b, c = Model("a", waiting=deque([5.0])), Model("b", waiting=deque([3.0, 9.0])), Model("c")
    plan, _ = plan_swap([a, b, c], 2, TIMING, now=10.0)
    assert plan is not None and plan.model is b and plan.victim is None
    assert plan_swap([c], 1, TIMING, now=10.0) == (None, None)  # nothing queued


def test_a_busy_model_yields_after_the_bounded_wait_not_before() -> None:
    loaded = Model("a", is_loaded=True, num_in_use=3, loaded_at=0.0)
    queued = Model("b", waiting=deque([10.0]))
    assert plan_swap([loaded, queued], 1, TIMING, now=11.0) == (None, 12.0)  # a's queue first
    plan, _ = plan_swap([loaded, queued], 1, TIMING, now=12.0)
    assert plan is not None and plan.model is queued and plan.victim is loaded


def test_a_drained_model_yields_at_once_and_a_fresh_one_serves_its_residency() -> None:
    drained = Model("a", is_loaded=True, loaded_at=9.9)
    queued = Model("b", waiting=deque([10.0]))
    plan, _ = plan_swap([drained, queued], 1, TIMING, now=10.0)
    assert plan is not None and plan.victim is drained  # no queue to serve: residency does not hold it
    fresh = Model("a", is_loaded=True, num_in_use=1, loaded_at=20.0)
    aged = Model("b", waiting=deque([10.0]))  # waited through a's load: past the bounded wait already
    assert plan_swap([fresh, aged], 1, TIMING, now=20.5) == (None, 21.0)
    slow = Model("a", is_loaded=True, num_in_use=1, loaded_at=20.0, load_seconds=1.5)
    assert plan_swap([slow, aged], 1, TIMING, now=20.5) == (None, 21.5)  # serves as long as it loaded
    slower = Model("a", is_loaded=True, num_in_use=1, loaded_at=20.0, load_seconds=4.0)
    assert plan_swap([slower, aged], 1, TIMING, now=20.5) == (None, 22.0)  # but no longer than max_wait


def test_a_model_that_just_loaded_is_held_by_the_requests_it_woke_first() -> None:
    # a loaded at 20.0; its queued requests are woken but not yet holding it; b waited past everything
    woken = Model("a", is_loaded=True, loaded_at=20.0, waiting=deque([11.0, 12.0]))
    aged = Model("b", waiting=deque([10.0]))
    assert plan_swap([woken, aged], 1, TIMING, now=30.0) == (None, None)  # their wake-up is the next change
    woken.waiting.clear()
    woken.num_in_use = 2
    plan, _ = plan_swap([woken, aged], 1, TIMING, now=30.0)
    assert plan is not None and plan.victim is woken


def test_a_model_between_batches_is_not_drained_until_the_grace_passes() -> None:
    # a batch answered every request at 10.0; their clients' next requests are on their way
    between = Model("a", is_loaded=True, loaded_at=0.0, idle_since=10.0)
    queued = Model("b", waiting=deque([9.5]))
    assert plan_swap([between, queued], 1, TIMING, now=10.05) == (None, 10.0 + TIMING.drain_grace)
    plan, _ = plan_swap([between, queued], 1, TIMING, now=10.0 + TIMING.drain_grace)
    assert plan is not None and plan.victim is between


def test_the_least_recently_used_loaded_model_makes_room() -> None:
    busy = [Model(name, is_loaded=True, num_in_use=1, last_used=used) for name, used in (("x", 5), ("y", 2))]
    queued = Model("b", waiting=deque([0.0]))
    plan, _ = plan_swap([*busy, queued], 2, TIMING, now=10.0)
    assert plan is not None and plan.victim is busy[1]


# ---- the registry, over fake engines that take LOAD_SECONDS to load ---------------------------------------


@pytest.mark.anyio
async def test_the_loaded_model_serves_its_requests_first_then_swaps_on_drain() -> None:
    models = registry("a", "b", timing=SwapTiming(max_wait=30.0, min_residency=0.0))
    models.start()
    release = asyncio.Event()
    order: list[str] = []

    async def use(name: str, hold: asyncio.Event | None = None) -> None:
        async with models.use(name):
            order.append(name)
            if hold is not None:
                await hold.wait()

    try:
        holder = asyncio.create_task(use("a", release))
        await asyncio.sleep(0.05)
        b_request = asyncio.create_task(use("b"))
        await asyncio.sleep(0.1)
        await asyncio.wait_for(use("a"), TIMEOUT)  # a still has a request: a's new one goes first
        assert order == ["a", "a"] and models.models[0].is_loaded and not models.models[0].evicting
        release.set()  # a drains: b loads long before the 30 s bounded wait
        await asyncio.wait_for(asyncio.gather(holder, b_request), TIMEOUT)
        assert order == ["a", "a", "b"] and [m.num_loads for m in models.models] == [1, 1]
    finally:
        await asyncio.to_thread(models.shutdown)


@pytest.mark.anyio
async def test_a_model_that_never_drains_yields_after_the_bounded_wait() -> None:
    max_wait = 0.3
    models = registry("a", "b", timing=SwapTiming(max_wait=max_wait, min_residency=0.0))
    models.start()
    stop = asyncio.Event()

    async def busy_a() -> None:  # a's requests overlap: a never drains on its own
        while not stop.is_set():
            async with models.use("a"):
                await asyncio.sleep(0.02)

    async def timed_b() -> float:
        start = time.monotonic()
        async with models.use("b"):
            return time.monotonic() - start

    try:
        clients = [asyncio.create_task(busy_a()) for _ in range(3)]
        await asyncio.sleep(0.1)
        waited = await asyncio.wait_for(timed_b(), TIMEOUT)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), TIMEOUT)
        assert max_wait <= waited <= max_wait + LOAD_SECONDS + 0.5, waited
    finally:
        await asyncio.to_thread(models.shutdown)


@pytest.mark.anyio
async def test_mixed_traffic_loads_once_per_queue_drain() -> None:
    """The issue's repro: 200 requests of two models alternating at concurrency 16 through one slot (before:
    200 loads)."""
    timing = SwapTiming(max_wait=0.5, min_residency=0.1)
    models = registry("a", "b", timing=timing)
    models.start()
    names = deque("ab"[i % 2] for i in range(200))
    waits: list[float] = []

    async def client() -> None:
        while names:
            name = names.popleft()
            start = time.monotonic()
            async with models.use(name):
                waits.append(time.monotonic() - start)
                await asyncio.sleep(0.002)  # the forward pass

    try:
        await asyncio.to_thread(models.wait_until_ready, TIMEOUT)
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(16))), TIMEOUT)
    finally:
        await asyncio.to_thread(models.shutdown)
    num_loads = sum(model.num_loads for model in models.models) - 1  # the start-up load of a
    assert len(waits) == 200 and num_loads <= 10, num_loads
    bound = timing.max_wait + 2 * LOAD_SECONDS + 0.5  # + an unload (engine thread join) and scheduling slack
    assert max(waits) <= bound, (max(waits), statistics.median(waits))
