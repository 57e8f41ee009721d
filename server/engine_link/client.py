"""An API worker's side of the engine link: ``EngineLink`` (the sockets and their reader thread) and one
``RemoteEngineThread`` per model, which an ``AsyncLLMEngine`` drives exactly as it drives an
``EngineThread``: calls go out as one message per event-loop iteration, answers come back one message per
engine step and resolve the calls' futures on their loop (one ``call_soon_threadsafe`` per message).

The reader thread also hears the engine process's state every 0.1 s (``/health``, the watchdog, the
token budget ``/info`` shows) and watches a pipe the engine process holds open: when that process dies,
every pending call fails with ``EngineDeadError`` and the model's state turns FAILED, which stops the worker
with status 1 (``EngineMonitor``), as a crashed engine thread stops a single-process server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import zmq

from server.engine_link import wire
from server.engine_link.engine_process import IN_ENDPOINT, OUT_ENDPOINT, endpoint
from wde.config import EngineConfig
from wde.entrypoints.engine_thread import (
    Call,
    EngineCounts,
    EngineDeadError,
    EngineInfo,
    EngineLifecycle,
    EngineState,
    EngineUnavailableError,
    resolve_calls,
)
from wde.tokenizer import Tokenizer

logger = logging.getLogger("wde.server")

ENGINE_GONE = "the engine process stopped; restart the server"
POLL_MS = 200  # the reader thread looks at ``close()`` this often


class EngineLink:
    def __init__(
        self, worker_name: str, ipc_dir: str, engine_alive: Connection | None, role: str = "api"
    ) -> None:
        """``role``: the worker's in ``wde_process_cpu_seconds`` (``api-N``)."""
        self.name = worker_name
        self.role = role
        self._context = zmq.Context()
        # no high-water marks: a full queue would block the event loop (PUSH) or drop answers (the engine's
        # ROUTER); what is in flight is bounded by admission (--max-concurrent-requests)
        self._push = self._context.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)
        self._push.connect(endpoint(ipc_dir, IN_ENDPOINT))
        self._push_lock = threading.Lock()  # the event loop, the registry's shutdown thread
        self._pull = self._context.socket(zmq.DEALER)
        self._pull.setsockopt(zmq.IDENTITY, worker_name.encode())
        self._pull.setsockopt(zmq.RCVHWM, 0)
        self._pull.connect(endpoint(ipc_dir, OUT_ENDPOINT))
        self._engine_alive = engine_alive
        self.threads: dict[int, RemoteEngineThread] = {}  # by model index
        self._scrape_ids = itertools.count()
        self._scrapes: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes]]] = {}
        self._reader = threading.Thread(target=self._read, name="wde-engine-link", daemon=True)
        self._closed = False
        self._last_states: list[list[Any]] = []  # the engine process's last word on each model
        self.heard = threading.Event()  # set by its first state message

    def thread_for(self, model_index: int, engine_config: EngineConfig) -> RemoteEngineThread:
        thread = RemoteEngineThread(self, model_index, engine_config)
        self.threads[model_index] = thread
        if model_index < len(self._last_states):  # a worker started while the engine serves: ready at once
            thread.update(self._last_states[model_index])
        return thread

    def start(self) -> None:
        """Connect (idempotent); the engine process answers with every model's state (``heard``)."""
        if not self._reader.is_alive():
            self._reader.start()
            self.send(["hello", self.name])

    def send(self, message: list[Any]) -> None:
        self.send_frames([wire.pack(message)])

    def send_frames(self, frames: list[bytes]) -> None:
        with self._push_lock:
            if not self._closed:
                self._push.send_multipart(frames)  # copied: zero-copy frames cost more when small

    def close(self) -> None:
        """Say goodbye and close the sockets (the reader thread ends within a poll interval)."""
        with self._push_lock:
            if self._closed:
                return
            self._push.send(wire.pack(["bye", self.name]))
            self._closed = True
        self._push.close(linger=1000)
        if self._reader.is_alive() and threading.current_thread() is not self._reader:
            self._reader.join(2 * POLL_MS / 1000)
        if not self._reader.is_alive():
            self._pull.close(linger=0)
            self._context.term()

    async def scrape(
        self, observations: list[list[Any]], cache_stats: dict[str, Any], cpu: list[Any]
    ) -> bytes:
        """The server's /metrics text, rendered by the engine process (after these HTTP observations)."""
        loop = asyncio.get_running_loop()
        scrape_id = next(self._scrape_ids)
        future: asyncio.Future[bytes] = loop.create_future()
        self._scrapes[scrape_id] = (loop, future)
        try:
            self.send(["scrape", self.name, scrape_id, observations, cache_stats, cpu])
            return await asyncio.wait_for(future, timeout=10.0)
        finally:
            self._scrapes.pop(scrape_id, None)

    # ---- the reader thread ------------------------------------------------------------------------------
    def _read(self) -> None:
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        if self._engine_alive is not None:
            poller.register(self._engine_alive.fileno(), zmq.POLLIN)
        while not self._closed:
            events = dict(poller.poll(POLL_MS))
            if self._pull in events:
                while True:
                    try:
                        data = self._pull.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._dispatch(wire.unpack(data))
            if self._engine_alive is not None and self._engine_alive.fileno() in events:
                # the only writer is the engine process: readable means it closed (it died or ended)
                for thread in self.threads.values():
                    thread.engine_gone(ENGINE_GONE)
                return

    def _dispatch(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "answers":
            finished: list[Call] = []
            for answer in message[1]:
                thread = self.threads.get(answer[1])
                call = None if thread is None else thread.take(answer[2])
                if call is None:
                    continue  # aborted meanwhile
                if answer[0] == "done":
                    call.outputs = wire.decode_outputs(answer[3], call.request_ids)  # type: ignore[assignment]
                    finished.append(call)
                else:
                    call.fail(wire.decode_error(answer[3]))
            if finished:
                resolve_calls(finished)
        elif kind == "state":
            self._last_states = message[1]
            self.heard.set()
            for model_index, state in enumerate(message[1]):
                thread = self.threads.get(model_index)
                if thread is not None:
                    thread.update(state)
        elif kind == "scraped":
            entry = self._scrapes.get(message[1])
            if entry is not None:
                loop, future = entry
                loop.call_soon_threadsafe(_resolve, future, message[2])


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _call_fields(call_id: int, call: Call) -> list[Any]:
    params = wire.encode_params(call.params)
    return [call_id, call.request_ids, call.prompts, params, call.priority, call.arrival_time]


class _RunningForward:
    """``ForwardClock``'s one method, from the engine process's last state message."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def running_seconds(self) -> float:
        return self.seconds


class RemoteEngineThread(EngineLifecycle):
    """What ``AsyncLLMEngine`` needs of its ``EngineThread``, for an engine in the engine process (its
    ``listeners`` stay empty: the engine process's metrics observe the engine)."""

    def __init__(self, link: EngineLink, model_index: int, engine_config: EngineConfig) -> None:
        super().__init__()
        self._link = link
        self._model_index = model_index
        self._engine_config = engine_config
        self._lock = threading.Lock()  # state, pending
        self._stopped = threading.Event()
        self._call_ids = itertools.count()
        self._pending: dict[int, Call] = {}
        self._call_of_first_request: dict[str, int] = {}  # to abort by request ids
        self._reason = "the model is still loading; retry in a few seconds"
        self.forward_clock = _RunningForward()

    # ---- what AsyncLLMEngine calls (any thread) ---------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self.state == EngineState.CREATED:
                self.state = EngineState.LOADING
        self._link.start()

    def unavailable_reason(self) -> str:
        return "" if self.state == EngineState.READY else self._reason

    def add(self, call: Call) -> None:
        self.add_many([call])

    def add_many(self, calls: Sequence[Call]) -> None:
        """One message for the calls: a header frame, then one frame per call, each packed alone, so that
        a call whose inputs cannot cross (an integer over 64 bits) fails alone."""
        frames = [wire.pack(["add", self._link.name, self._model_index])]
        with self._lock:
            if self.state == EngineState.FAILED:
                raise EngineDeadError(self._reason)
            if self.state != EngineState.READY:
                raise EngineUnavailableError(self._reason)
            for call in calls:
                if not call.request_ids:
                    call.resolve()
                    continue
                call_id = next(self._call_ids)
                try:
                    frames.append(wire.pack(_call_fields(call_id, call)))
                except (TypeError, ValueError, OverflowError) as e:
                    call.fail(ValueError(f"the inputs cannot be sent to the engine: {e}"))
                    continue
                self._pending[call_id] = call
                self._call_of_first_request[call.request_ids[0]] = call_id
        if len(frames) > 1:
            self._link.send_frames(frames)

    def abort(self, request_ids: list[str]) -> None:
        if not request_ids:
            return
        with self._lock:
            call_id = self._call_of_first_request.pop(request_ids[0], None)
            if call_id is None or self._pending.pop(call_id, None) is None:
                return
            self._note_idle()
        self._link.send(["abort", self._link.name, self._model_index, call_id, request_ids])

    def stop(self, timeout: float | None = None) -> None:
        """This worker takes no more work for the model; its calls still in the engine are answered first
        (up to ``timeout`` s). The engine itself goes on: the engine process stops it."""
        with self._lock:
            if self.state in (EngineState.LOADING, EngineState.READY, EngineState.CREATED):
                self.state = EngineState.DRAINING
                self._reason = "the server is shutting down; retry on another replica"
            idle = not self._pending
        if not idle:
            self._stopped.wait(timeout)
        with self._lock:
            if self.state != EngineState.FAILED:
                self.state = EngineState.STOPPED
        self._ready.set()
        if all(
            thread.state in (EngineState.STOPPED, EngineState.FAILED)
            for thread in self._link.threads.values()
        ):
            self._link.close()

    # ---- the link's reader thread ---------------------------------------------------------------------
    def take(self, call_id: int) -> Call | None:
        with self._lock:
            call = self._pending.pop(call_id, None)
            if call is not None:
                self._call_of_first_request.pop(call.request_ids[0], None)
            self._note_idle()
        return call

    def _note_idle(self) -> None:
        """(lock held) A draining thread with nothing pending lets ``stop`` return."""
        if not self._pending and self.state == EngineState.DRAINING:
            self._stopped.set()

    def update(self, values: list[Any]) -> None:
        state_name, reason, num_waiting, num_unfinished, forward_seconds, backend, budget = values
        remote = EngineState(state_name)
        self.counts = EngineCounts(num_waiting, num_unfinished)
        self.forward_clock.seconds = forward_seconds
        if remote == EngineState.READY and self.info is None:
            self.info = self._engine_info(backend, budget)
        with self._lock:
            if self.state in (EngineState.STOPPED, EngineState.FAILED):
                return
            if remote == EngineState.FAILED:
                self._fail_all(reason)
                return
            if self.state == EngineState.DRAINING:
                return
            if remote in (EngineState.READY, EngineState.LOADING):
                self.state = remote
                self._reason = reason
            elif remote in (EngineState.DRAINING, EngineState.STOPPED):
                self.state = EngineState.DRAINING
                self._reason = reason or "the server is shutting down; retry on another replica"
        if remote == EngineState.READY:
            self._ready.set()

    def engine_gone(self, reason: str) -> None:
        with self._lock:
            if self.state == EngineState.STOPPED:
                return
            self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        """(lock held) FAILED: every pending call gets the reason, the worker's monitor stops it."""
        self.state = EngineState.FAILED
        self._reason = reason
        self.error = EngineDeadError(reason)
        calls, self._pending = list(self._pending.values()), {}
        self._call_of_first_request.clear()
        for call in calls:
            call.fail(EngineDeadError(reason))
        self._stopped.set()
        self._ready.set()
        self._dead.set()

    def _engine_info(self, backend: str, budget: list[Any] | None) -> EngineInfo:
        """The engine's config (with the token budget its runner chose) and this worker's tokenizer."""
        engine_config = self._engine_config
        if budget is not None:
            scheduler_config = engine_config.scheduler_config.with_budget(int(budget[0]), str(budget[1]))
            engine_config = dataclasses.replace(engine_config, scheduler_config=scheduler_config)
        model_config = engine_config.model_config
        tokenizer = Tokenizer.from_pretrained(
            model_config.tokenizer,
            model_config.max_model_len,
            model_config.pair_truncation,
            model_config.added_special_tokens,
        )
        logger.debug("worker %s: engine %d ready (pid %d)", self._link.name, self._model_index, os.getpid())
        return EngineInfo(engine_config, backend, tokenizer.untruncated())
