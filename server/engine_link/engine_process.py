"""The engine process of ``wde serve --api-workers N``: the models, the device, the one metrics registry.

    API worker ──PUSH──▶ PULL  (Submit, Abort, Hello, Bye, HttpStats, Scrape, Ranges: engine_link/messages.py)
    API worker ◀─DEALER── ROUTER (Answers, States, Scraped, Ranges)

It runs the same engines as a single-process server (``ModelRegistry`` over ``AsyncLLMEngine``: each
``LLMEngine`` on its ``EngineThread``); the workers send requests they validated and tokenized, which go to
the scheduler as they are (``LLMEngine.add_prepared``). This process's asyncio loop only turns messages into
``Call``s and finished ``Call``s into messages. Request ids are made unique across workers here
("<worker>/<id>"). Every 0.1 s (and at once when it changes) each worker hears every
model's state, queue counts and running forward time, which its ``/health``, ``/info`` and watchdog read.
``/metrics`` is rendered here for every worker: the engines' metrics, and the HTTP metrics the workers
forward in batches. The int8 / uint8 ranges are computed once per server: each model's ``Calibration``
lives here (computed at load, kept across loads); a worker hears every set kept so far when it says hello
and each new one as it is computed, here or by another worker (``Ranges``).

Exit status: 0 after SIGTERM (every accepted call answered), 1 when a model fails to load or an engine
dies (the workers see it in the next state message and stop with 1 as well).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import zmq

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
    Ranges,
    Scrape,
    Scraped,
    States,
    Submit,
)
from server.engine_link.model_turns import ModelTurns
from server.observability.metrics import ServerMetrics
from server.observability.process_cpu import name_process
from server.process.config_process import build_configs
from server.process.log_setup import configure_logging
from server.process.memory_release import limit_malloc_arenas
from server.process.openmp_spin import bound_openmp_spin
from server.process.parent_death import end_with_parent
from server.process.ready_line import log_ready
from server.served_models.model_registry import ModelRegistry, ServedModel
from server.served_models.swap_policy import SwapTiming
from server.settings import ServerSettings
from wde.config import EngineConfig
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import Call, EngineState, EngineUnavailableError
from wde.entrypoints.output_precision import Calibration
from wde.inputs import PoolingParams
from wde.request import Request
from wde.thread_names import name_os_thread

logger = logging.getLogger("wde.server")

STATE_INTERVAL = 0.1  # seconds between state messages to the workers
POLL_MS = 200  # the input thread looks at the end of the drain this often
IN_ENDPOINT, OUT_ENDPOINT = "engine-in", "engine-out"


def endpoint(ipc_dir: str, name: str) -> str:
    return f"ipc://{ipc_dir}/{name}"


def main_reading_configs(
    all_engine_args: Sequence[EngineArgs],
    settings: ServerSettings,
    ipc_dir: str,
    log_level: str,
    slots: InFlightSlots,
    alive: Connection,
    orders: Connection,
    parent_pid: int | None = None,
    ready: Any = None,
) -> None:
    """``wde serve --api-workers``'s engine process (``supervisor.EngineStart``): it reads the models'
    configs first and sends them to the supervisor over ``orders`` (or the exception that refused one),
    then waits for its word: the URL to serve at, or None (the server runs in one process after all)."""
    _set_up(log_level, parent_pid)
    try:
        served = build_configs(all_engine_args)
    except Exception as e:  # a bad flag or model folder: the supervisor refuses it in one line
        orders.send(("error", _picklable(e)))
        return
    orders.send(("configs", [config for _, config in served]))
    try:
        url = orders.recv()
    except EOFError:  # the supervisor is gone
        url = None
    if url is not None:
        _serve(served, settings, ipc_dir, slots, alive, url, parent_pid, ready)


def _set_up(log_level: str, parent_pid: int | None) -> None:
    """As ``wde serve`` sets itself up, before torch loads (server/cli.py's step 1)."""
    name_process("engine")
    limit_malloc_arenas()
    bound_openmp_spin()
    configure_logging(log_level)
    if parent_pid is not None:
        end_with_parent(parent_pid)


def _serve(
    served: Sequence[tuple[EngineArgs, EngineConfig]],
    settings: ServerSettings,
    ipc_dir: str,
    slots: InFlightSlots,
    alive: Connection,
    url: str,
    parent_pid: int | None,
    ready: Any,
) -> None:
    # the result cache lives in the workers, beside the plans that consult it
    served = [(dataclasses.replace(args, cache_size=0), config) for args, config in served]
    models = ModelRegistry.from_configs(
        served,
        settings.max_loaded_models,
        strict_names=settings.strict_model_name,
        swap_timing=SwapTiming.of(settings),
        freeze_heap=True,
    )
    metrics = ServerMetrics(models, slots.total, role="engine", parent_pid=parent_pid)
    models.add_engine_hook(lambda model, engine: engine.add_stats_listener(metrics.listener(model.name)))
    server = EngineServer(models, metrics, ipc_dir, settings, url, ready)
    status = server.run()
    alive.close()
    raise SystemExit(status)


def _picklable(error: Exception) -> Exception:
    """``error`` when it crosses a pipe as it is, else a RuntimeError with its text."""
    try:
        pickle.dumps(error)
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


class EngineServer:
    """The engine process's side of the link, with no event loop on the request path: an input thread turns
    messages into calls for the engines' threads (every message waiting at each wake); an engine thread
    answers the calls a step finished itself (as their ``CallSink``): one message per worker, the engines'
    state first when it changed. The output thread sends the rest: the state every 0.1 s, failed calls,
    scrapes and ranges. Handing each step's answers to the output thread cost a thread wake-up a step: at
    concurrency 32 (~6 one-text requests a step) answering on the engine thread took the process from 89
    to 78 CPU-µs a request beside the forward (``benchmarks.serve_cost``, 2 cores, medians of 3 pairs)."""

    def __init__(
        self,
        models: ModelRegistry,
        metrics: ServerMetrics,
        ipc_dir: str,
        settings: ServerSettings,
        url: str,
        ready: Any = None,
    ) -> None:
        self.models = models
        self.ready = ready  # set once every model is ready (the supervisor tells a failed start from a crash)
        self.settings = settings
        self.url = url
        self.metrics = metrics
        self.workers: set[bytes] = set()
        self.status = 0
        # (worker, model index, call id) -> the call in the engine, until answered or aborted (the input
        # thread adds, the engine and output threads remove: single dict operations)
        self.calls: dict[tuple[bytes, int, int], LinkedCall] = {}
        self._context = zmq.Context()
        self.inbox = self._context.socket(zmq.PULL)  # the input thread's
        self.inbox.setsockopt(zmq.RCVHWM, 0)  # unbounded: admission bounds what is in flight
        self.inbox.bind(endpoint(ipc_dir, IN_ENDPOINT))
        self.outbox = self._context.socket(zmq.ROUTER)  # the engine threads' and the output thread's
        self.outbox.setsockopt(zmq.SNDHWM, 0)  # a full queue would drop a worker's answers
        self.outbox.bind(endpoint(ipc_dir, OUT_ENDPOINT))
        self._outbox_lock = threading.Lock()  # one thread at a time on the outbox (and the last state)
        self._outgoing: queue.SimpleQueue[Outgoing] = queue.SimpleQueue()
        # --max-loaded-models: calls wait for their model's turn (None: every model stays loaded)
        self.turns = ModelTurns(models, self._is_pending, self.failed) if models.takes_turns else None
        # each model's calibration from the start (an unloaded one's too: a worker may compute its ranges)
        self.calibrations: list[Calibration] = []
        for model_index, model in enumerate(models.models):
            if model.calibration is None:
                model.calibration = Calibration.from_file(model.engine_args.calibration_file)
            model.calibration.on_store = functools.partial(self._computed, model_index)
            self.calibrations.append(model.calibration)
        self.stopping = threading.Event()
        self._receiving = True
        self._last_state = b""
        self._last_state_time = 0.0

    # ---- life cycle -------------------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent forwards what it gets
        self.models.start()
        if self.turns is not None:
            self.turns.start()
        threads = [
            threading.Thread(target=self._watch_loads, name="wde-load", daemon=True),
            threading.Thread(target=self._receive, name="wde-link-in", daemon=True),
            threading.Thread(target=self._send, name="wde-link-out", daemon=True),
        ]
        for thread in threads:
            thread.start()
        while not self.stopping.wait(0.5):
            pass
        # every worker has stopped by now (the parent stops them first): drain what the engines still hold
        self._receiving = False
        if self.turns is not None:
            self.turns.stop()
        self.models.shutdown()
        self._outgoing.put(Order.STOP)
        threads[2].join(5.0)
        threads[1].join(1.0)
        self._context.destroy(linger=0)
        return self.status

    def _watch_loads(self) -> None:
        """Log each model's ready line; a model that cannot load at start-up, or an engine that dies, ends
        the process with status 1 (after the workers heard the state). A model that fails to load later
        (--max-loaded-models) answers its queued requests 503 instead, as in a single-process server."""
        name_os_thread()
        for engine in self._engines():
            try:
                engine.wait_until_ready()
            except Exception as e:
                logger.error("the model failed to load, stopping the server: %s", e)
                self._fail_soon()
                return
            log_ready(engine, self.settings, self.url)
        if self.ready is not None:
            self.ready.set()
        while not self.stopping.wait(0.5):
            if any(engine.state == EngineState.FAILED for engine in self._engines()):
                self._fail_soon()
                return

    def _engines(self) -> list[AsyncLLMEngine]:
        """The loaded models' engines (read once: another thread may unload one meanwhile)."""
        return [engine for engine in (model.engine for model in self.models.models) if engine is not None]

    def _fail_soon(self) -> None:
        """One state message first, so the workers say the engine's reason, then stop with 1."""
        self.status = 1
        self._outgoing.put(Order.STATES)
        threading.Timer(2 * STATE_INTERVAL, self.stopping.set).start()

    # ---- messages in: the input thread ---------------------------------------------------------------------
    def _receive(self) -> None:
        name_os_thread()
        while self._receiving:
            if not self.inbox.poll(POLL_MS):
                continue
            while True:  # every message waiting, one wake-up for all
                try:
                    data = self.inbox.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
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
            self._outgoing.put(Message(message.worker.encode(), Scraped(message.scrape_id, text)))
        elif isinstance(message, Hello):
            worker = message.worker.encode()
            self.workers.add(worker)
            self._outgoing.put(Order.STATES)  # the newcomer hears the state at once, and the ranges kept
            for model_index, calibration in enumerate(self.calibrations):
                for options, ranges in calibration.kept():
                    self._outgoing.put(Message(worker, Ranges.of("", model_index, options, ranges)))
        elif isinstance(message, Ranges):  # a worker computed them: keep, and tell the others
            self.calibrations[message.model].keep(message.options, message.ranges.array())
            self._outgoing.put(Shared(message))
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
        """The worker's prepared requests, as calls of their models' engines (one command each; each call
        waits for its model's turn first when the models take turns)."""
        by_model: dict[int, list[LinkedCall]] = {}
        for linked in _calls(message, self):
            self.calls[linked.key] = linked
            by_model.setdefault(linked.key[1], []).append(linked)
        for model_index, model_calls in by_model.items():
            if self.turns is not None:
                self.turns.submit(model_index, model_calls)
                continue
            engine = self.models.models[model_index].engine
            try:
                if engine is None:
                    raise EngineUnavailableError("the model is not loaded")
                engine.submit_calls(model_calls)
            except Exception as error:
                for failed in model_calls:
                    self.failed(failed, error)

    def _abort(self, message: Abort) -> None:
        call = self._forget((message.worker.encode(), message.model, message.call_id))
        engine = self.models.models[message.model].engine
        if call is not None and engine is not None:
            engine.abort_requests(call.request_ids)

    def _forget(self, key: tuple[bytes, int, int]) -> LinkedCall | None:
        """The call, no longer pending (answered or aborted): it lets go of its model (None: gone already)."""
        call = self.calls.pop(key, None)
        if call is not None and call.release is not None:
            call.release()
        return call

    def _is_pending(self, call: LinkedCall) -> bool:
        return call.key in self.calls

    def _computed(self, model_index: int, options: PoolingParams, ranges: Any) -> None:
        """A model's calibration computed ranges here (at load, on its engine thread): every worker hears."""
        self._outgoing.put(Shared(Ranges.of("", model_index, options, ranges)))

    # ---- CallSink: the engines' threads --------------------------------------------------------------------
    def finished(self, calls: Sequence[Call]) -> None:
        """A step's finished calls, answered now on the engine thread: one ``Answers`` per worker."""
        answers: dict[bytes, list[Answer]] = {}
        for call in calls:
            self._add_answer(answers, call, call.outputs, None)
        with self._outbox_lock:
            self._send_answers(answers)

    def failed(self, call: Call, error: BaseException) -> None:
        self._outgoing.put(Failed(call, error))

    # ---- messages out: the output thread ---------------------------------------------------------------
    def _send(self) -> None:
        """Send what is queued (failed calls, one message per worker for all that is waiting); the engines'
        state when it changed and at least once a second, looked at every 0.1 s."""
        name_os_thread()
        while True:
            try:
                items = [self._outgoing.get(timeout=STATE_INTERVAL)]
            except queue.Empty:
                items = []
            while True:
                try:
                    items.append(self._outgoing.get_nowait())
                except queue.Empty:
                    break
            with self._outbox_lock:
                if not self._send_items(items):
                    return

    def _send_items(self, items: list[Outgoing]) -> bool:
        """(outbox lock held) Send ``items``; False after ``Order.STOP``."""
        answers: dict[bytes, list[Answer]] = {}
        for item in items:
            if item is Order.STOP:
                self._send_states(force=True)
                return False
            if item is Order.STATES:
                self._send_states(force=True)
            elif isinstance(item, Message):
                self._answer(item.worker, item.message)
            elif isinstance(item, Shared):
                packed = messages.encode(item.ranges)
                for worker in list(self.workers):
                    if worker != item.ranges.worker.encode():
                        self._send_packed(worker, packed)
            elif isinstance(item, Failed):
                self._add_answer(answers, item.call, None, item.error)
        if answers:
            self._send_answers(answers)
        else:
            self._send_states()
        return True

    def _send_answers(self, answers: dict[bytes, list[Answer]]) -> None:
        """(outbox lock held) One ``Answers`` per worker, the state first when it changed: a worker never
        sees counts older than an answer (as in one process)."""
        if not answers:
            return
        self._send_states()
        for worker, worker_answers in answers.items():
            self._answer(worker, Answers(worker_answers))

    def _add_answer(
        self, answers: dict[bytes, list[Answer]], call: Call, outputs: Any, error: BaseException | None
    ) -> None:
        if not isinstance(call, LinkedCall) or self._forget(call.key) is None:
            return  # aborted (every call here is a LinkedCall: made by _calls)
        worker, model_index, call_id = call.key
        if error is not None:
            answer = Answer(model_index, call_id, None, Error.of(error))
        else:
            answer = Answer(model_index, call_id, [messages.output_of(output) for output in outputs])
        answers.setdefault(worker, []).append(answer)

    def _answer(self, worker: bytes, message: messages.ToWorker) -> None:
        self._send_packed(worker, messages.encode(message))

    def _send_packed(self, worker: bytes, packed: bytes) -> None:
        try:
            self.outbox.send_multipart([worker, packed], flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # the worker is gone (or not connected yet): nobody waits for this
            logger.debug("dropped a message to worker %s", worker)

    def _send_states(self, force: bool = False) -> None:
        """Every model's state, to every worker: when it changed, and at least once a second."""
        turns = self.turns is not None
        packed = messages.encode(States([_model_state(model, turns) for model in self.models.models]))
        now = time.monotonic()
        if packed == self._last_state and not force and now - self._last_state_time < 1.0:
            return
        self._last_state, self._last_state_time = packed, now
        for worker in list(self.workers):
            self._send_packed(worker, packed)


@dataclasses.dataclass(eq=False)
class LinkedCall(Call):
    """A worker's call in the engine process: answered through the ``EngineServer`` (its sink), by key."""

    key: tuple[bytes, int, int] = (b"", 0, 0)  # (worker, model index, the worker's call id)
    release: Callable[[], None] | None = None  # lets go of its model (``ModelTurns``), once answered


@dataclasses.dataclass(frozen=True)
class Failed:
    call: Call
    error: BaseException


@dataclasses.dataclass(frozen=True)
class Message:
    worker: bytes
    message: messages.ToWorker


@dataclasses.dataclass(frozen=True)
class Shared:
    """Ranges for every worker but the one that computed them."""

    ranges: Ranges


class Order(enum.Enum):
    STOP = "stop"  # after a last state message
    STATES = "states"  # the state now, changed or not


Outgoing = Failed | Message | Shared | Order  # what the output thread takes


def _model_state(model: ServedModel, turns: bool) -> ModelState:
    """``turns``: the models take turns (--max-loaded-models): an unloaded one takes calls (they queue
    here, and it loads on demand)."""
    engine, num_loads = model.engine, model.num_loads
    if engine is None:
        if turns:
            num_queued = len(model.waiting)
            return ModelState(
                EngineState.READY.value, "", num_queued, num_queued, 0.0, "", None, None, False, num_loads
            )
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
        True,
        num_loads,
    )


def _calls(message: Submit, server: EngineServer) -> Iterator[LinkedCall]:
    """Each call of ``message``, its requests ready to queue (their ids views of the message's arrays),
    answered through ``server``; request ids made unique across workers ("<worker>/<id>")."""
    worker, prefix = message.worker.encode(), message.worker + "/"
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
        yield LinkedCall(
            [request.request_id for request in requests],
            (),
            params,
            None,
            None,
            priority=call_in.priority,
            arrival_time=call_in.arrival_time,
            prepared=requests,
            sink=server,
            key=(worker, call_in.model, call_in.call_id),
        )
