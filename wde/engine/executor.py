"""Runs scheduled batches on the model runner: inline (sync) or on a worker thread (async)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from wde.engine.request import Request


class ModelRunner(Protocol):
    """What the engine needs of a runner (defined in wde.worker; the engine never imports torch)."""

    def prepare_inputs(self, requests: list[Request]) -> Any: ...

    def execute_model(self, batch: Any) -> list[Any]: ...

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int: ...

    def has_pending_captures(self) -> bool: ...


@dataclass
class BatchResult:
    requests: list[Request]
    outputs: list[Any] | None = None  # one per request, in order
    error: Exception | None = None  # set when the whole forward failed
    execute_seconds: float = 0.0  # the forward pass alone (on the worker thread when async)


def _run(runner: ModelRunner, requests: list[Request], batch: Any) -> BatchResult:
    start = time.perf_counter()
    try:
        outputs = runner.execute_model(batch)
    except Exception as e:  # one failing batch must not take the engine down
        return BatchResult(requests, error=e, execute_seconds=time.perf_counter() - start)
    return BatchResult(requests, outputs=outputs, execute_seconds=time.perf_counter() - start)


def _prepare(runner: ModelRunner, requests: list[Request]) -> tuple[Any, BatchResult | None]:
    try:
        return runner.prepare_inputs(requests), None
    except Exception as e:
        return None, BatchResult(requests, error=e)


class Executor:
    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner

    def execute_model(self, requests: list[Request]) -> list[BatchResult]:
        """Submit a batch (possibly empty); return the results of batches that completed."""
        raise NotImplementedError

    def has_in_flight(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass


class SyncExecutor(Executor):
    def execute_model(self, requests: list[Request]) -> list[BatchResult]:
        if not requests:
            return []
        batch, failed = _prepare(self.runner, requests)
        return [failed or _run(self.runner, requests, batch)]


class AsyncExecutor(Executor):
    """Forward passes run on one worker thread while the engine thread schedules, tokenizes and builds the
    next batch: up to ``max_in_flight`` batches are submitted before the oldest is waited for."""

    def __init__(self, runner: ModelRunner, max_in_flight: int = 2) -> None:
        super().__init__(runner)
        self.max_in_flight = max_in_flight
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wde-forward")
        self._in_flight: deque[Future[BatchResult]] = deque()

    def has_in_flight(self) -> bool:
        return bool(self._in_flight)

    def execute_model(self, requests: list[Request]) -> list[BatchResult]:
        results: list[BatchResult] = []
        # 1. build the batch here (overlapping the running forward), run it on the worker
        if requests:
            batch, failed = _prepare(self.runner, requests)
            if failed is not None:
                results.append(failed)
            else:
                self._in_flight.append(self._pool.submit(_run, self.runner, requests, batch))
        # 2. wait for the oldest when the pipe is full or nothing new came in; collect any already done
        if self._in_flight and (len(self._in_flight) >= self.max_in_flight or not requests):
            results.append(self._in_flight.popleft().result())
        while self._in_flight and self._in_flight[0].done():
            results.append(self._in_flight.popleft().result())
        return results

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


EXECUTORS: dict[str, type[Executor]] = {"sync": SyncExecutor, "async": AsyncExecutor}
