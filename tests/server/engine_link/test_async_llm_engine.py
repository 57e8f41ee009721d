"""AsyncLLMEngine: life cycle, drain, abort and failures on a fake engine; numbers on the real model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from tests.server.conftest import LONG_TEXT, TEXTS, TOLERANCE, reference, wait_for
from tests.server.fake_engine import FakeEngine
from wde import EngineArgs
from wde.engine.errors import InputTooLongError, RequestFailedError
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import EngineDeadError, EngineState, EngineUnavailableError

pytestmark = pytest.mark.anyio
TIMEOUT = 30.0


class Recorder:
    def __init__(self) -> None:
        self.steps: list = []
        self.outputs: list = []
        self.num_aborted = 0

    def on_step(self, stats) -> None:
        self.steps.append(stats)

    def on_outputs(self, outputs) -> None:
        self.outputs.extend(outputs)

    def on_aborted(self, num_requests: int) -> None:
        self.num_aborted += num_requests


@pytest.fixture
def fake() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def engine(fake: FakeEngine) -> Iterator[AsyncLLMEngine]:
    engine = AsyncLLMEngine(EngineArgs(), build_engine=lambda: fake)
    engine.start()
    engine.wait_until_ready(TIMEOUT)
    yield engine
    fake.gate.set()
    engine.shutdown(TIMEOUT)


# ---- fake engine: the loop's contract --------------------------------------------------------------
async def test_encode_answers_every_input_in_order(engine: AsyncLLMEngine, fake: FakeEngine) -> None:
    recorder = Recorder()
    engine.add_stats_listener(recorder)
    outputs = await engine.encode(["a", "bbb", "cc"])
    assert [output.embedding[0] for output in outputs] == [1, 3, 2]
    assert engine.state == EngineState.READY and engine.is_ready
    assert recorder.steps and len(recorder.outputs) == 3
    assert engine.num_unfinished == 0 and engine.num_waiting == 0


async def test_concurrent_calls_share_steps_and_get_their_own_answers(
    engine: AsyncLLMEngine, fake: FakeEngine
) -> None:
    fake.gate.clear()
    first = asyncio.create_task(engine.encode(["a"] * 3))
    await wait_for(fake.stepping.is_set, TIMEOUT, "the first step")
    second = asyncio.create_task(engine.encode(["bb"] * 2))
    await asyncio.sleep(0)  # the second call's add waits in the command queue behind the blocked step
    fake.gate.set()
    assert [o.embedding[0] for o in await first] == [1, 1, 1]
    assert [o.embedding[0] for o in await second] == [2, 2]


async def test_validation_errors_raise_to_the_caller_and_leave_the_queue_alone(
    engine: AsyncLLMEngine, fake: FakeEngine
) -> None:
    with pytest.raises(TypeError, match=r"inputs\[1\]"):
        await engine.encode(["ok", 5])
    with pytest.raises(ValueError, match="empty"):
        await engine.encode([])
    assert fake.queued == {} and engine.num_unfinished == 0
    assert len(await engine.encode(["still works"])) == 1


async def test_failed_inputs_raise_their_error_named_by_position(engine: AsyncLLMEngine) -> None:
    with pytest.raises(
        InputTooLongError, match=r"inputs\[1\]: input has 999 tokens \(1 more inputs failed\)"
    ):
        await engine.encode(["fine", "too long 1", "too long 2"])


async def test_cancelled_call_aborts_its_queued_requests(engine: AsyncLLMEngine, fake: FakeEngine) -> None:
    recorder = Recorder()
    engine.add_stats_listener(recorder)
    fake.max_per_step = 1
    fake.gate.clear()
    call = asyncio.create_task(engine.encode(["a", "b", "c"]))
    await wait_for(fake.stepping.is_set, TIMEOUT, "the first step")  # "a" runs, "b" and "c" are queued
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    fake.gate.set()
    await wait_for(lambda: recorder.num_aborted == 2, TIMEOUT, "the abort of b and c")
    await wait_for(lambda: engine.num_unfinished == 0, TIMEOUT, "an empty engine")
    assert fake.num_steps == 1 and fake.queued == {}


async def test_calls_of_one_loop_iteration_reach_the_engine_thread_together(
    engine: AsyncLLMEngine, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hop per event loop iteration each way: the calls made in it are one command for the engine
    thread, and the calls one step finishes are answered with one wake-up of the loop."""
    thread = engine._thread
    batches: list[int] = []
    add_many = thread.add_many
    monkeypatch.setattr(thread, "add_many", lambda calls: (batches.append(len(calls)), add_many(calls)))
    loop = asyncio.get_running_loop()
    wakeups: list[int] = []
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(callback, *args):
        if args and isinstance(args[0], list):  # a step's answers: [(future, outputs), ...]
            wakeups.append(len(args[0]))
        return call_soon_threadsafe(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    fake.gate.clear()
    tasks = [asyncio.create_task(engine.encode(["x" * n])) for n in range(1, 6)]
    await wait_for(fake.stepping.is_set, TIMEOUT, "the first step")
    fake.gate.set()
    answers = await asyncio.gather(*tasks)
    assert [outputs[0].embedding[0] for outputs in answers] == [1, 2, 3, 4, 5]
    assert batches == [5] and fake.num_steps == 1
    assert wakeups == [5]


async def test_a_call_taken_back_before_its_hop_never_reaches_the_engine(
    engine: AsyncLLMEngine, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wde.entrypoints.engine_thread import Call

    batches: list[int] = []
    add_many = engine._thread.add_many
    monkeypatch.setattr(
        engine._thread, "add_many", lambda calls: (batches.append(len(calls)), add_many(calls))
    )
    loop = asyncio.get_running_loop()
    kept, dropped = (Call([f"{name}-0"], ["a"], None, loop, loop.create_future()) for name in ("k", "d"))
    engine._add_soon(loop, kept)
    engine._add_soon(loop, dropped)
    assert engine._unqueue(loop, dropped) and not engine._unqueue(loop, dropped)
    outputs = await asyncio.wait_for(kept.future, TIMEOUT)
    assert batches == [1] and outputs[0].request_id == "k-0" and not dropped.future.done()
    assert not engine._unqueue(loop, kept)  # handed over: a cancel aborts it in the engine instead


async def test_a_hop_that_fails_answers_every_call_of_it(
    engine: AsyncLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the hand-over raises reaches every call gathered into it: none waits forever."""

    def refuse(calls: list) -> None:
        raise RuntimeError("the engine thread's queue is gone")

    monkeypatch.setattr(engine._thread, "add_many", refuse)
    tasks = [asyncio.create_task(engine.encode([text])) for text in ("a", "b", "c")]
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), TIMEOUT)
    assert [str(result) for result in results] == ["the engine thread's queue is gone"] * 3


async def test_shutdown_finishes_accepted_work_then_refuses(engine: AsyncLLMEngine, fake: FakeEngine) -> None:
    fake.gate.clear()
    in_flight = asyncio.create_task(engine.encode(["a", "b"]))
    await wait_for(fake.stepping.is_set, TIMEOUT, "the first step")
    stopper = threading.Thread(target=engine.shutdown, args=(TIMEOUT,))
    stopper.start()
    await wait_for(lambda: engine.state == EngineState.DRAINING, TIMEOUT, "draining")
    with pytest.raises(EngineUnavailableError, match="shutting down"):
        await engine.encode(["late"])
    fake.gate.set()
    assert len(await in_flight) == 2
    await asyncio.to_thread(stopper.join, TIMEOUT)
    assert engine.state == EngineState.STOPPED and fake.is_shut_down


async def test_a_crashing_step_fails_pending_calls_and_the_engine(
    engine: AsyncLLMEngine, fake: FakeEngine
) -> None:
    fake.step_error = RuntimeError("device lost")
    with pytest.raises(EngineDeadError, match="device lost"):
        await engine.encode(["a"])
    assert engine.state == EngineState.FAILED and not engine.is_ready
    with pytest.raises(EngineUnavailableError, match="restart"):
        await engine.encode(["b"])


async def test_forward_errors_are_not_reported_as_bad_input(engine: AsyncLLMEngine, fake: FakeEngine) -> None:
    from wde.outputs import ErrorOutput

    original = fake.step

    def failing_step():
        return [ErrorOutput(output.request_id, RuntimeError("CUDA error")) for output in original()]

    fake.step = failing_step
    with pytest.raises(RequestFailedError, match=r"inputs\[0\]: CUDA error"):
        await engine.encode(["a"])


def test_load_failure_is_raised_by_wait_until_ready() -> None:
    def broken() -> FakeEngine:
        raise FileNotFoundError("no weights here")

    engine = AsyncLLMEngine(EngineArgs(), build_engine=broken)
    assert engine.state == EngineState.CREATED
    engine.start()
    with pytest.raises(EngineDeadError, match="no weights here"):
        engine.wait_until_ready(TIMEOUT)
    assert engine.state == EngineState.FAILED
    engine.shutdown(TIMEOUT)


async def test_encode_before_start_is_unavailable() -> None:
    engine = AsyncLLMEngine(EngineArgs(), build_engine=FakeEngine)
    with pytest.raises(EngineUnavailableError, match="loading"):
        await engine.encode(["a"])
    engine.shutdown(TIMEOUT)
    assert engine.state == EngineState.STOPPED
    with pytest.raises(EngineUnavailableError, match="stopped before"):
        engine.wait_until_ready(TIMEOUT)


# ---- the real engine: same numbers as LLM.encode ---------------------------------------------------
async def test_real_engine_equals_llm_encode(async_engine: AsyncLLMEngine, default_llm) -> None:
    outputs = await async_engine.encode(TEXTS)
    got = np.stack([output.embedding for output in outputs])
    assert np.abs(got - reference(default_llm, TEXTS)).max() <= TOLERANCE
    assert [output.num_tokens for output in outputs][-1] == 256
    assert all(output.metrics is not None for output in outputs)


async def test_real_engine_input_errors(async_engine: AsyncLLMEngine) -> None:
    with pytest.raises(TypeError, match=r"inputs\[0\]"):
        await async_engine.encode([3.5])
    with pytest.raises(ValueError, match="dimensions"):
        await async_engine.encode(["a"], dimensions=10_000)
    with pytest.raises(InputTooLongError, match=r"inputs\[1\]: input has \d+ tokens"):
        await async_engine.encode(["ok", LONG_TEXT], truncate=False)
    with pytest.raises(InputTooLongError, match="max_model_len"):
        await async_engine.encode([{"prompt_token_ids": [101] * 300}], truncate=False)
    assert async_engine.num_unfinished == 0
