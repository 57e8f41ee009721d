"""CallRecord through AsyncLLMEngine.observe_calls over a fake-runner engine: one record per submission,
its outputs in input order, each input's engine times on its metrics (arrival <= tokenizer call <=
scheduled <= finished <= answered), and no record once the observer is removed."""

from __future__ import annotations

import asyncio

from tests.unit.engine.conftest import make_engine
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.call_record import CallRecord

TIMEOUT = 10.0


def test_one_record_per_submission_with_the_engine_times() -> None:
    engine, _, _ = make_engine()
    door = AsyncLLMEngine(EngineArgs(), build_engine=lambda: engine)
    door.start()
    door.wait_until_ready(TIMEOUT)
    records: list[CallRecord] = []

    async def main() -> None:
        door.observe_calls(records.append)
        await door.encode(["one", "two words", {"prompt_token_ids": [101, 7, 102]}])
        door.observe_calls(None)
        await door.encode(["unobserved"])

    try:
        asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    finally:
        door.shutdown(TIMEOUT)
    (record,) = records
    assert [output.num_tokens for output in record.outputs] == [3, 4, 3]
    for output in record.outputs[:2]:
        metrics = output.metrics
        assert (
            metrics is not None and metrics.tokenize_span is not None and metrics.scheduled_time is not None
        )
        start, end = metrics.tokenize_span
        assert metrics.arrival_time <= start <= end <= metrics.scheduled_time <= metrics.finished_time
        assert metrics.finished_time <= record.answered_time
    token_input = record.outputs[2].metrics
    assert token_input is not None and token_input.tokenize_span is None  # token ids: no tokenizer call
