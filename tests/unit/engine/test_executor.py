"""Executors over a fake runner: sync runs inline, async keeps up to two batches in flight, and a batch that
raises is retried without its culprit so that only the culprit fails."""

from __future__ import annotations

import pytest

from tests.unit.engine.conftest import FakeRunner, make_request
from wde.engine.errors import RequestFailedError
from wde.engine.executor import EXECUTORS, AsyncExecutor, SyncExecutor


def test_sync_runs_inline_and_skips_empty_batches() -> None:
    runner = FakeRunner()
    executor = SyncExecutor(runner)
    assert executor.execute_model([]) == []
    requests = [make_request("a", [1, 2]), make_request("b", [3, 4, 5])]
    (result,) = executor.execute_model(requests)
    assert result.requests == requests
    assert result.outputs == [3.0, 12.0]
    assert result.errors == {}
    assert result.execute_seconds >= 0.0
    assert not executor.has_in_flight()


def test_async_keeps_two_batches_in_flight_and_returns_them_in_order() -> None:
    executor = AsyncExecutor(FakeRunner(), max_in_flight=2)
    try:
        first = [make_request("a", [1])]
        second = [make_request("b", [2])]
        results = executor.execute_model(first)  # the pipe is not full: may return nothing yet
        results += executor.execute_model(second)  # full: waits for the oldest
        assert [r.requests[0].request_id for r in results][:1] == ["a"]
        while executor.has_in_flight():
            results += executor.execute_model([])  # nothing new: waits for the rest
        assert [r.requests[0].request_id for r in results] == ["a", "b"]
        assert [r.outputs for r in results] == [[1.0], [2.0]]
    finally:
        executor.shutdown()


@pytest.mark.parametrize("name", sorted(EXECUTORS))
@pytest.mark.parametrize("culprit_row", [0, 3, 6])
def test_one_failing_row_fails_alone(name: str, culprit_row: int) -> None:
    requests = [make_request(f"r{i}", [i + 1]) for i in range(7)]
    runner = FakeRunner(poisoned={f"r{culprit_row}"})
    executor = EXECUTORS[name](runner)
    try:
        results = executor.execute_model(requests)
        while executor.has_in_flight():
            results += executor.execute_model([])
    finally:
        executor.shutdown()
    (result,) = results
    assert set(result.errors) == {culprit_row}
    assert isinstance(result.errors[culprit_row], RequestFailedError)
    for row, output in enumerate(result.outputs):
        assert output == (None if row == culprit_row else float(row + 1))


def test_a_batch_that_cannot_be_built_is_retried_without_its_culprit() -> None:
    requests = [make_request(f"r{i}", [i + 1]) for i in range(4)]
    runner = FakeRunner(poisoned={"r2"}, fail_prepare=True)
    (result,) = SyncExecutor(runner).execute_model(requests)
    assert set(result.errors) == {2}
    assert result.outputs == [1.0, 2.0, None, 4.0]
