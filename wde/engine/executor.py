"""Runs scheduled batches on the model runner: inline (sync) or on a worker thread (async). A batch that
fails is retried without its culprits (``CulpritSearch``), on the thread that ran it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from wde.engine.culprit_search import CulpritSearch
from wde.engine.forward_clock import ForwardClock
from wde.request import Request
from wde.thread_names import name_os_thread


class ModelRunner(Protocol):
    """What the engine needs of a runner (defined in wde.worker; the engine never imports torch)."""

    # the attention backend class it chose (``name``, ``is_padded``), None until the model is loaded
    attn_backend_cls: Any

    def prepare_inputs(self, requests: list[Request]) -> Any: ...

    def execute_model(self, batch: Any) -> list[Any]: ...

    def capture_while_idle(self, is_idle: Callable[[], bool]) -> int: ...

    def has_pending_captures(self) -> bool: ...

    # the device time of the last ``execute_model`` (CUDA events; 0.0 where the device has none)
    last_device_seconds: float


@dataclass
class BatchResult:
    requests: list[Request]
    outputs: list[Any]  # one per request, in order; None for a request in ``errors``
    errors: dict[int, Exception] = field(default_factory=dict)  # row -> why that request failed (alone)
    execute_seconds: float = 0.0  # the forward pass alone, retries included (on the worker thread when async)
    # the CPU time of the thread that ran it, over the same span (torch's intra-op workers not included)
    execute_cpu_seconds: float = 0.0
    device_seconds: float = 0.0  # the GPU's time on it (``ModelRunner.last_device_seconds``)


def _prepare(runner: ModelRunner, requests: list[Request]) -> Any:
    """The built batch, or the exception building it raised (retried by ``_run`` without its culprit)."""
    try:
        return runner.prepare_inputs(requests)
    except Exception as e:
        return e


def _run(runner: ModelRunner, requests: list[Request], batch: Any, clock: ForwardClock) -> BatchResult:
    """Run a built batch; when it fails, retry without the culprits so that only they fail."""
    start, cpu_start = time.perf_counter(), time.thread_time()
    error = batch if isinstance(batch, Exception) else None
    if error is None:
        try:
            with clock:
                outputs = runner.execute_model(batch)
            seconds, cpu_seconds = time.perf_counter() - start, time.thread_time() - cpu_start
            return BatchResult(
                requests,
                outputs,
                execute_seconds=seconds,
                execute_cpu_seconds=cpu_seconds,
                device_seconds=getattr(runner, "last_device_seconds", 0.0),
            )
        except Exception as e:  # one failing input must not fail its batch, nor take the engine down
            error = e
    outputs, errors = CulpritSearch(runner, clock).run(requests, error)
    seconds, cpu_seconds = time.perf_counter() - start, time.thread_time() - cpu_start
    return BatchResult(requests, outputs, errors, execute_seconds=seconds, execute_cpu_seconds=cpu_seconds)


class Executor:
    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.clock = ForwardClock()  # how long the running forward pass has taken (any thread reads it)

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
        return [_run(self.runner, requests, _prepare(self.runner, requests), self.clock)]


class AsyncExecutor(Executor):
    """Forward passes run on one worker thread while the engine thread schedules, tokenizes and builds the
    next batch: up to ``max_in_flight`` batches are submitted before the oldest is waited for."""

    def __init__(self, runner: ModelRunner, max_in_flight: int = 2) -> None:
        super().__init__(runner)
        self.max_in_flight = max_in_flight
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="wde-forward", initializer=name_os_thread
        )
        self._in_flight: deque[Future[BatchResult]] = deque()

    def has_in_flight(self) -> bool:
        return bool(self._in_flight)

    def execute_model(self, requests: list[Request]) -> list[BatchResult]:
        results: list[BatchResult] = []
        # 1. build the batch here (overlapping the running forward), run it on the worker
        if requests:
            batch = _prepare(self.runner, requests)
            self._in_flight.append(self._pool.submit(_run, self.runner, requests, batch, self.clock))
        # 2. wait for the oldest when the pipe is full or nothing new came in; collect any already done
        if self._in_flight and (len(self._in_flight) >= self.max_in_flight or not requests):
            results.append(self._in_flight.popleft().result())
        while self._in_flight and self._in_flight[0].done():
            results.append(self._in_flight.popleft().result())
        return results

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


EXECUTORS: dict[str, type[Executor]] = {"sync": SyncExecutor, "async": AsyncExecutor}
