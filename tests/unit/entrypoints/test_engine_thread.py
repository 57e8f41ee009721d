"""EngineThread's commands over a fake-runner engine: add answers each call once through its future, a bad
call fails alone, abort drops queued requests, stop drains accepted work then refuses, a crashing step fails
every pending call with EngineDeadError, and a load failure is reported to whoever waits."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.unit.engine.conftest import FakeRunner, make_engine
from wde.engine.llm_engine import LLMEngine
from wde.entrypoints.engine_thread import (
    Call,
    EngineDeadError,
    EngineState,
    EngineThread,
    EngineUnavailableError,
)
from wde.inputs import PoolingParams
from wde.outputs import EmbeddingOutput

TIMEOUT = 10.0


def _started(runner: FakeRunner | None = None) -> tuple[EngineThread, LLMEngine]:
    engine, _, _ = make_engine(runner=runner)
    thread = EngineThread(lambda: engine)
    thread.start()
    thread.wait_until_ready(TIMEOUT)
    return thread, engine


def _call(loop: asyncio.AbstractEventLoop, prefix: str, prompts: list) -> Call:
    ids = [f"{prefix}-{i}" for i in range(len(prompts))]
    return Call(ids, prompts, PoolingParams(), loop, loop.create_future())


def test_each_call_is_answered_once_in_input_order() -> None:
    thread, _ = _started()

    async def main() -> list:
        loop = asyncio.get_running_loop()
        calls = [_call(loop, f"c{n}", ["a b", "c", "d e f"]) for n in range(3)]
        for call in calls:
            thread.add(call)
        return await asyncio.wait_for(asyncio.gather(*(call.future for call in calls)), TIMEOUT)

    try:
        answers = asyncio.run(main())
    finally:
        thread.stop(TIMEOUT)
    for n, outputs in enumerate(answers):
        assert [o.request_id for o in outputs] == [f"c{n}-0", f"c{n}-1", f"c{n}-2"]
        assert all(isinstance(o, EmbeddingOutput) for o in outputs)
        assert [o.num_tokens for o in outputs] == [4, 3, 5]
    assert thread.state == EngineState.STOPPED
    assert thread.info is not None and thread.info.attention_backend == "fake"


def test_a_bad_call_fails_alone_and_an_empty_call_resolves() -> None:
    thread, _ = _started()

    async def main() -> tuple:
        loop = asyncio.get_running_loop()
        bad, good, empty = _call(loop, "bad", ["ok", 7]), _call(loop, "good", ["ok"]), _call(loop, "e", [])
        for call in (bad, good, empty):
            thread.add(call)
        results = await asyncio.gather(bad.future, good.future, empty.future, return_exceptions=True)
        return tuple(results)

    try:
        bad_result, good_result, empty_result = asyncio.run(main())
    finally:
        thread.stop(TIMEOUT)
    assert isinstance(bad_result, TypeError) and "inputs[1]" in str(bad_result)
    assert isinstance(good_result[0], EmbeddingOutput)
    assert empty_result == []


def test_stop_drains_accepted_work_then_refuses() -> None:
    gate = threading.Event()

    class GatedRunner(FakeRunner):
        def execute_model(self, batch: list) -> list[float]:
            gate.wait(TIMEOUT)
            return super().execute_model(batch)

    thread, _ = _started(GatedRunner())

    async def main() -> list:
        loop = asyncio.get_running_loop()
        call = _call(loop, "c", ["one", "two"])
        thread.add(call)
        stopper = threading.Thread(target=thread.stop, args=(TIMEOUT,))
        stopper.start()
        while thread.state != EngineState.DRAINING:
            await asyncio.sleep(0.001)
        with pytest.raises(EngineUnavailableError, match="shutting down"):
            thread.add(_call(loop, "late", ["x"]))
        gate.set()
        outputs = await asyncio.wait_for(call.future, TIMEOUT)
        stopper.join(TIMEOUT)
        return outputs

    outputs = asyncio.run(main())
    assert len(outputs) == 2 and thread.state == EngineState.STOPPED


def test_abort_drops_queued_requests() -> None:
    gate = threading.Event()

    class GatedRunner(FakeRunner):
        def execute_model(self, batch: list) -> list[float]:
            gate.wait(TIMEOUT)
            return super().execute_model(batch)

    runner = GatedRunner()
    engine, _, _ = make_engine(runner=runner, max_num_seqs=1)
    thread = EngineThread(lambda: engine)
    thread.start()
    thread.wait_until_ready(TIMEOUT)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first, second = _call(loop, "first", ["a"]), _call(loop, "second", ["b"])
        thread.add(first)
        thread.add(second)
        thread.abort(second.request_ids)
        gate.set()
        await asyncio.wait_for(first.future, TIMEOUT)

    try:
        asyncio.run(main())
    finally:
        thread.stop(TIMEOUT)
    assert ["second-0"] not in runner.batches


def test_a_crashing_step_fails_pending_calls_and_the_thread() -> None:
    class CrashingEngine(LLMEngine):
        def step(self) -> list:
            raise MemoryError("simulated loop crash")

    engine, runner, _ = make_engine()
    crashing = CrashingEngine(
        engine.engine_config, engine.workflow, engine.tokenizer, runner, is_padded=False
    )
    thread = EngineThread(lambda: crashing)
    thread.start()
    thread.wait_until_ready(TIMEOUT)

    async def main() -> BaseException:
        loop = asyncio.get_running_loop()
        call = _call(loop, "c", ["x"])
        thread.add(call)
        with pytest.raises(EngineDeadError) as info:
            await asyncio.wait_for(call.future, TIMEOUT)
        return info.value

    error = asyncio.run(main())
    assert "restart the server" in str(error)
    assert thread.wait_until_dead(TIMEOUT) and thread.state == EngineState.FAILED
    with pytest.raises(EngineDeadError):
        thread.add(Call(["z"], ["z"], PoolingParams(), asyncio.new_event_loop(), None))  # type: ignore[arg-type]


def test_a_load_failure_reaches_whoever_waits() -> None:
    def broken() -> LLMEngine:
        raise OSError("no weights here")

    thread = EngineThread(broken)
    thread.start()
    with pytest.raises(EngineDeadError, match="failed to start: no weights here"):
        thread.wait_until_ready(TIMEOUT)
    assert "dead" in thread.unavailable_reason()


def test_work_before_start_is_refused_as_loading() -> None:
    thread = EngineThread(lambda: make_engine()[0])
    assert "still loading" in thread.unavailable_reason()
    thread.stop()
    assert thread.state == EngineState.STOPPED
