"""The engine process of ``wde serve --api-workers N``: the models, the device, the one metrics registry.

    API worker ──PUSH──▶ PULL  (add, abort, hello, http metrics, scrape)
    API worker ◀─DEALER── ROUTER (done, failed, state, scraped)

It runs the same engines as a single-process server (``ModelRegistry`` over ``AsyncLLMEngine``: each
``LLMEngine`` on its ``EngineThread``, tokenizing lazily with its tokenizer pool); this process's asyncio
loop only turns messages into ``Call``s and finished ``Call``s into messages. Request ids are made unique
across workers here ("<worker>/<id>"). Every 0.1 s (and at once when it changes) each worker hears every
model's state, queue counts and running forward time, which its ``/health``, ``/info`` and watchdog read.
``/metrics`` is rendered here for every worker: the engines' metrics, and the HTTP metrics the workers
forward in batches.

Exit status: 0 after SIGTERM (every accepted call answered), 1 when a model fails to load or an engine
dies (the workers see it in the next state message and stop with 1 as well).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import zmq
import zmq.asyncio

from server.draining_server import log_ready
from server.engine_link import wire
from server.engine_link.in_flight import InFlightSlots
from server.engine_link.parent_death import end_with_parent
from server.log_setup import configure_logging
from server.memory_release import limit_malloc_arenas
from server.metrics import ServerMetrics
from server.model_registry import ModelRegistry
from server.openmp_spin import bound_openmp_spin
from server.process_cpu import name_process
from server.settings import ServerSettings
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import Call, EngineState, EngineUnavailableError

logger = logging.getLogger("wde.server")

STATE_INTERVAL = 0.1  # seconds between state messages to the workers
IN_ENDPOINT, OUT_ENDPOINT = "engine-in", "engine-out"


def endpoint(ipc_dir: str, name: str) -> str:
    return f"ipc://{ipc_dir}/{name}"


def main(
    served: Sequence[tuple[EngineArgs, EngineConfig]],
    settings: ServerSettings,
    ipc_dir: str,
    log_level: str,
    slots: InFlightSlots,
    alive: Connection,
    url: str = "",
    parent_pid: int | None = None,
) -> None:
    """The engine process's entry point (``multiprocessing`` spawn target); exits with its status.
    ``alive``: the write end of a pipe the workers watch, held open (never written) while this lives."""
    name_process("engine")
    limit_malloc_arenas()
    bound_openmp_spin()
    configure_logging(log_level)
    if parent_pid is not None:
        end_with_parent(parent_pid)
    # the result cache lives in the workers, beside the plans that consult it
    served = [(dataclasses.replace(args, cache_size=0), config) for args, config in served]
    models = ModelRegistry.from_configs(served, strict_names=settings.strict_model_name, freeze_heap=True)
    metrics = ServerMetrics(models, slots.total, role="engine", parent_pid=parent_pid)
    models.add_engine_hook(lambda model, engine: engine.add_stats_listener(metrics.listener(model.name)))
    server = EngineServer(models, metrics, ipc_dir, settings, url)
    status = asyncio.run(server.run())
    alive.close()
    raise SystemExit(status)


class EngineServer:
    def __init__(
        self, models: ModelRegistry, metrics: ServerMetrics, ipc_dir: str, settings: ServerSettings, url: str
    ) -> None:
        self.models = models
        self.settings = settings
        self.url = url
        self.metrics = metrics
        self.ipc_dir = ipc_dir
        self.workers: set[bytes] = set()
        self.status = 0
        # (worker, model index, call id) -> the call in the engine, until answered or aborted
        self.calls: dict[tuple[bytes, int, int], Call] = {}
        self._outbox: dict[bytes, list[list[Any]]] = {}  # answers gathered in this loop iteration
        self._flush_scheduled = False
        self._last_state: bytes = b""

    # ---- life cycle -------------------------------------------------------------------------------------
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        context = zmq.asyncio.Context()
        self.inbox = context.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.RCVHWM, 0)  # unbounded: admission bounds what is in flight
        self.inbox.bind(endpoint(self.ipc_dir, IN_ENDPOINT))
        self.outbox = context.socket(zmq.ROUTER)
        self.outbox.setsockopt(zmq.SNDHWM, 0)  # a full queue would drop a worker's answers
        self.outbox.bind(endpoint(self.ipc_dir, OUT_ENDPOINT))
        self.stopping = asyncio.Event()
        self.loop.add_signal_handler(signal.SIGTERM, self.stopping.set)
        self.loop.add_signal_handler(signal.SIGINT, lambda: None)  # the parent forwards what it gets
        self.models.start()
        engines = [model.loaded_engine for model in self.models.models]
        threading.Thread(target=self._watch_loads, args=(engines,), name="wde-load", daemon=True).start()
        tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._publish_states())]
        await self.stopping.wait()
        # every worker has stopped by now (the parent stops them first): drain what the engines still hold
        await asyncio.to_thread(self.models.shutdown)
        await self._send_states(force=True)
        for task in tasks:
            task.cancel()
        context.destroy(linger=0)
        return self.status

    def _watch_loads(self, engines: list[AsyncLLMEngine]) -> None:
        """Log each model's ready line; a model that cannot load, or an engine that dies, ends the process
        with status 1 (after the workers heard the state)."""
        for engine in engines:
            try:
                engine.wait_until_ready()
            except Exception as e:
                logger.error("the model failed to load, stopping the server: %s", e)
                self._fail_soon()
                return
            log_ready(engine, self.settings, self.url)
        while not any(engine.wait_until_dead(0.5) for engine in engines):
            if self.stopping.is_set():
                return
        self._fail_soon()

    def _fail_soon(self) -> None:
        def fail() -> None:
            self.status = 1
            self.stopping.set()

        # one state message first, so the workers say the engine's reason, then stop
        self.loop.call_soon_threadsafe(lambda: self.loop.call_later(2 * STATE_INTERVAL, fail))

    # ---- messages in ------------------------------------------------------------------------------------
    async def _receive(self) -> None:
        while True:
            frames = await self.inbox.recv_multipart()
            try:
                self._apply(wire.unpack(frames[0]), frames[1:])
            except Exception:  # a bad message must not end the engine process
                logger.exception("an engine-link message failed")

    def _apply(self, message: list[Any], call_frames: list[bytes]) -> None:
        kind, worker = message[0], message[1].encode()
        if kind == "add":
            self._add(worker, message[2], [wire.unpack(frame) for frame in call_frames])
        elif kind == "abort":
            self._abort(worker, message[2], message[3], message[4])
        elif kind == "http":
            self._observe(worker, message[2], message[3], message[4])
        elif kind == "scrape":
            self._observe(worker, message[3], message[4], message[5])
            self._answer(worker, ["scraped", message[2], self.metrics.render()])
        elif kind == "hello":
            self.workers.add(worker)
            self._last_state = b""  # the newcomer hears the state at once
        elif kind == "bye":
            self.workers.discard(worker)

    def _observe(
        self,
        worker: bytes,
        observations: list[list[Any]],
        cache_stats: dict[str, Any],
        cpu: list[Any],
    ) -> None:
        """A worker's HTTP answers, its result caches' counts and its CPU time ([role, seconds]), into the
        one registry."""
        for observation in observations:
            self.metrics.observe_http(*observation)
        self.metrics.process_cpu.reported[cpu[0]] = cpu[1]
        if cache_stats:
            self.metrics.worker_cache_stats[worker.decode()] = cache_stats

    def _add(self, worker: bytes, model_index: int, encoded_calls: list[list[Any]]) -> None:
        engine = self.models.models[model_index].engine
        prefix = worker.decode() + "/"
        calls = []
        for call_id, request_ids, prompts, params, priority, arrival_time in encoded_calls:
            call = Call(
                [prefix + request_id for request_id in request_ids],
                prompts,
                wire.decode_params(params),
                self.loop,
                self.loop.create_future(),
                priority=priority,
                arrival_time=arrival_time,
            )
            key = (worker, model_index, call_id)
            self.calls[key] = call
            call.future.add_done_callback(functools.partial(self._answered, key))
            calls.append(call)
        try:
            if engine is None:
                raise EngineUnavailableError("the model is not loaded")
            engine.submit_calls(calls)
        except Exception as error:
            for call in calls:
                call.future.set_exception(error)

    def _abort(self, worker: bytes, model_index: int, call_id: int, request_ids: list[str]) -> None:
        call = self.calls.pop((worker, model_index, call_id), None)
        engine = self.models.models[model_index].engine
        if call is None or engine is None:
            return
        engine.abort_requests(call.request_ids)
        call.future.cancel()

    # ---- messages out -----------------------------------------------------------------------------------
    def _answered(self, key: tuple[bytes, int, int], future: asyncio.Future[Any]) -> None:
        if self.calls.pop(key, None) is None or future.cancelled():
            return  # aborted
        worker, model_index, call_id = key
        error = future.exception()
        if error is not None:
            answer = ["failed", model_index, call_id, wire.encode_error(error)]
        else:
            answer = ["done", model_index, call_id, wire.encode_outputs(future.result())]
        self._outbox.setdefault(worker, []).append(answer)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """One message per worker for the calls answered in this loop iteration."""
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        for worker, answers in outbox.items():
            self._answer(worker, ["answers", answers])

    def _answer(self, worker: bytes, message: list[Any]) -> None:
        try:
            self.outbox.send_multipart([worker, wire.pack(message)], flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # the worker is gone (or not connected yet): nobody waits for this
            logger.debug("dropped a message to worker %s", worker)

    async def _publish_states(self) -> None:
        while True:
            await self._send_states()
            await asyncio.sleep(STATE_INTERVAL)

    async def _send_states(self, force: bool = False) -> None:
        """Every model's state, to every worker: sent when it changed, and at least once a second."""
        states = [_model_state(model.engine) for model in self.models.models]
        packed = wire.pack(["state", states])
        now = self.loop.time()
        if packed == self._last_state and not force and now - self._last_state_time < 1.0:
            return
        self._last_state, self._last_state_time = packed, now
        for worker in list(self.workers):
            try:
                await self.outbox.send_multipart([worker, packed], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                logger.debug("dropped the state message to worker %s", worker)

    _last_state_time = 0.0


def _model_state(engine: AsyncLLMEngine | None) -> list[Any]:
    """[state, reason, num_waiting, num_unfinished, running forward seconds, backend, token budget]."""
    if engine is None:
        return [EngineState.STOPPED.value, "the model is not loaded", 0, 0, 0.0, "", None]
    counts = engine.counts
    backend, budget = "", None
    if engine.is_ready:
        info = engine.info
        scheduler = info.engine_config.scheduler_config
        backend, budget = info.attention_backend, [scheduler.max_num_batched_tokens, scheduler.budget_reason]
    return [
        engine.state.value,
        engine.unavailable_reason,
        counts.num_waiting,
        counts.num_unfinished,
        round(engine.running_forward_seconds, 3),
        backend,
        budget,
    ]
