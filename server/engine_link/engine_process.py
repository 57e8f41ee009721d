"""The engine process of ``wde serve --api-workers N``: the models, the device, the one metrics registry.

    API worker ──PUSH──▶ PULL  (Submit, Abort, Hello, Bye, HttpStats, Scrape: server/engine_link/messages.py)
    API worker ◀─DEALER── ROUTER (Answers, States, Scraped)

It runs the same engines as a single-process server (``ModelRegistry`` over ``AsyncLLMEngine``: each
``LLMEngine`` on its ``EngineThread``); the workers send requests they validated and tokenized, which go to
the scheduler as they are (``LLMEngine.add_prepared``). This process's asyncio loop only turns messages into
``Call``s and finished ``Call``s into messages. Request ids are made unique across workers here
("<worker>/<id>"). Every 0.1 s (and at once when it changes) each worker hears every
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
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import zmq
import zmq.asyncio

from server.draining_server import log_ready
from server.engine_link import messages
from server.engine_link.in_flight import InFlightSlots
from server.engine_link.messages import (
    Abort,
    Answer,
    Answers,
    Bye,
    Error,
    Hello,
    HttpStats,
    ModelState,
    Scrape,
    Scraped,
    States,
    Submit,
)
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
from wde.request import Request

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
        self._outbox: dict[bytes, list[Answer]] = {}  # answers gathered in this loop iteration
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
        self._send_states(force=True)
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
            data = await self.inbox.recv()
            try:
                self._apply(messages.decode_to_engine(data))
            except Exception:  # a bad message must not end the engine process
                logger.exception("an engine-link message failed")

    def _apply(self, message: messages.ToEngine) -> None:
        if isinstance(message, Submit):
            self._submit(message)
        elif isinstance(message, Abort):
            self._abort(message)
        elif isinstance(message, HttpStats):
            self._observe(message)
        elif isinstance(message, Scrape):
            self._observe(message.stats)
            text = self.metrics.render()
            self._answer(message.worker.encode(), Scraped(message.scrape_id, text))
        elif isinstance(message, Hello):
            self.workers.add(message.worker.encode())
            self._last_state = b""  # the newcomer hears the state at once
        elif isinstance(message, Bye):
            self.workers.discard(message.worker.encode())

    def _observe(self, stats: HttpStats) -> None:
        """A worker's HTTP answers, its result caches' counts and its CPU time, into the one registry."""
        for observation in stats.observations:
            self.metrics.observe_http(*observation)
        if stats.cache_stats:
            self.metrics.worker_cache_stats[stats.worker] = stats.cache_stats
        self.metrics.process_cpu.reported[stats.role] = stats.cpu_seconds

    def _submit(self, message: Submit) -> None:
        """The worker's prepared requests, as ``Call``s of their models' engines (one command each)."""
        worker = message.worker.encode()
        prefix = message.worker + "/"
        calls: dict[int, list[Call]] = {}
        for call, key in _calls(message, prefix, self.loop):
            self.calls[(worker, key[0], key[1])] = call
            call.future.add_done_callback(functools.partial(self._answered, (worker, *key)))
            calls.setdefault(key[0], []).append(call)
        for model_index, model_calls in calls.items():
            engine = self.models.models[model_index].engine
            try:
                if engine is None:
                    raise EngineUnavailableError("the model is not loaded")
                engine.submit_calls(model_calls)
            except Exception as error:
                for call in model_calls:
                    call.future.set_exception(error)

    def _abort(self, message: Abort) -> None:
        call = self.calls.pop((message.worker.encode(), message.model, message.call_id), None)
        engine = self.models.models[message.model].engine
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
            answer = Answer(model_index, call_id, None, Error.of(error))
        else:
            answer = Answer(model_index, call_id, [messages.output_of(output) for output in future.result()])
        self._outbox.setdefault(worker, []).append(answer)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """One message per worker for the calls answered in this loop iteration, after the engines' state
        if it changed: a worker never sees counts older than an answer (as in one process)."""
        self._flush_scheduled = False
        self._send_states()
        outbox, self._outbox = self._outbox, {}
        for worker, answers in outbox.items():
            self._answer(worker, Answers(answers))

    def _answer(self, worker: bytes, message: messages.ToWorker) -> None:
        try:
            self.outbox.send_multipart([worker, messages.encode(message)], flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # the worker is gone (or not connected yet): nobody waits for this
            logger.debug("dropped a message to worker %s", worker)

    async def _publish_states(self) -> None:
        while True:
            self._send_states()
            await asyncio.sleep(STATE_INTERVAL)

    def _send_states(self, force: bool = False) -> None:
        """Every model's state, to every worker: sent when it changed, and at least once a second."""
        packed = messages.encode(States([_model_state(model.engine) for model in self.models.models]))
        now = self.loop.time()
        if packed == self._last_state and not force and now - self._last_state_time < 1.0:
            return
        self._last_state, self._last_state_time = packed, now
        for worker in list(self.workers):
            try:
                self.outbox.send_multipart([worker, packed], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                logger.debug("dropped the state message to worker %s", worker)

    _last_state_time = 0.0


def _model_state(engine: AsyncLLMEngine | None) -> ModelState:
    if engine is None:
        return ModelState(EngineState.STOPPED.value, "the model is not loaded", 0, 0, 0.0, "", None, None)
    counts = engine.counts
    backend, budget, reason = "", None, None
    if engine.is_ready:
        info = engine.info
        scheduler = info.engine_config.scheduler_config
        backend, budget, reason = (
            info.attention_backend,
            scheduler.max_num_batched_tokens,
            scheduler.budget_reason,
        )
    return ModelState(
        engine.state.value,
        engine.unavailable_reason,
        counts.num_waiting,
        counts.num_unfinished,
        round(engine.running_forward_seconds, 3),
        backend,
        budget,
        reason,
    )


def _calls(
    message: Submit, prefix: str, loop: asyncio.AbstractEventLoop
) -> Iterator[tuple[Call, tuple[int, int]]]:
    """Each call of ``message`` with its (model, call id): its requests ready to queue, their ids views of
    the message's arrays."""
    ids = message.token_ids.array()
    type_ids = None if message.type_ids is None else message.type_ids.array()
    start = type_start = 0
    for call_in in message.calls:
        params = message.params[call_in.params]
        prepared = call_in.requests
        requests = []
        for index, request_id in enumerate(prepared.request_ids):
            num_tokens = prepared.num_tokens[index]
            request = Request(
                prefix + request_id,
                params=params,
                arrival_time=call_in.arrival_time,
                priority=call_in.priority,
                token_ids=ids[start : start + num_tokens],
                truncated=prepared.truncated[index],
                num_unattended_tokens=prepared.num_unattended_tokens[index],
                tokenize_span=prepared.tokenize_span if prepared.tokenized[index] else None,
                ready=True,
            )
            if prepared.has_type_ids[index] and type_ids is not None:
                request.token_type_ids = type_ids[type_start : type_start + num_tokens]
                type_start += num_tokens
            start += num_tokens
            requests.append(request)
        request_ids = [request.request_id for request in requests]
        future = loop.create_future()
        call = Call(
            request_ids,
            (),
            params,
            loop,
            future,
            priority=call_in.priority,
            arrival_time=call_in.arrival_time,
            prepared=requests,
        )
        yield call, (call_in.model, call_in.call_id)
