"""An API worker's side of the engine link: ``EngineLink`` (the sockets and their reader thread) and one
``RemoteEngineThread`` per model, the ``EngineClient`` an ``AsyncLLMEngine`` drives exactly as it drives an
``EngineThread``. The worker validates and tokenizes each call's requests itself (``RequestPreparer``; a
large call on the model's preparing thread, off the event loop) and sends the ready ones as one ``Submit``
per event-loop iteration (their token ids in one array); a request that cannot run (too long with
truncation off) is answered here. Answers come back one message per engine
step and resolve the calls' futures on their loop (one ``call_soon_threadsafe`` per message).

The reader thread also hears the engine process's state every 0.1 s (``/health``, the watchdog, the
token budget ``/info`` shows) and watches a pipe the engine process holds open: when that process dies,
every pending call fails with ``EngineDeadError`` and the model's state turns FAILED, which stops the worker
with status 1 (``EngineMonitor``), as a crashed engine thread stops a single-process server. The int8 /
uint8 ranges the engine process or another worker computed arrive as ``Ranges`` and are kept in the
model's ``Calibration``; those this worker computes are sent to the engine process, which tells the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import zmq

from server.engine_link import messages
from server.engine_link.engine_process import IN_ENDPOINT, OUT_ENDPOINT, endpoint
from server.engine_link.messages import (
    Abort,
    Answers,
    Array,
    Bye,
    CallIn,
    Hello,
    HttpStats,
    ModelState,
    Prepared,
    Ranges,
    Scrape,
    Scraped,
    States,
    Submit,
)
from wde.config import EngineConfig, ModelConfig
from wde.engine.request_preparer import RequestPreparer
from wde.engine_args import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.engine_thread import (
    Call,
    EngineCounts,
    EngineDeadError,
    EngineInfo,
    EngineLifecycle,
    EngineState,
    EngineUnavailableError,
    Residency,
    resolve_calls,
)
from wde.entrypoints.output_precision import Calibration
from wde.inputs import PoolingParams
from wde.outputs import ErrorOutput, RequestMetrics
from wde.request import Request, RequestStatus
from wde.thread_names import name_os_thread
from wde.tokenizer import Tokenizer

logger = logging.getLogger("wde.server")

ENGINE_GONE = "the engine process stopped; restart the server"
POLL_MS = 200  # the reader thread looks at ``close()`` this often
HANDSHAKE_SECONDS = 10.0  # the longest a worker waits for its answer socket to connect before saying hello
# a call with more text than this is tokenized on a thread, not on the event loop (~1 ms of tokenizer time)
MAX_INLINE_CHARS = 16_384


class EngineLink:
    def __init__(
        self,
        worker_name: str,
        ipc_dir: str,
        engine_alive: Connection | None,
        role: str = "api",
        calibrations: Sequence[Calibration] = (),
    ) -> None:
        """``role``: the worker's in ``wde_process_cpu_seconds`` (``api-N``); ``calibrations``: each served
        model's, by index, shared with the engine process and the other workers."""
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
        # the connection's handshake, watched from before it starts (``start`` waits for it)
        self._handshake: zmq.Socket | None = self._pull.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._pull.connect(endpoint(ipc_dir, OUT_ENDPOINT))
        self._engine_alive = engine_alive
        self.threads: dict[int, RemoteEngineThread] = {}  # by model index
        self._scrape_ids = itertools.count()
        self._scrapes: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes]]] = {}
        self._reader = threading.Thread(target=self._read, name="wde-engine-link", daemon=True)
        self._closed = False
        self._last_states: list[ModelState] = []  # the engine process's last word on each model
        self.heard = threading.Event()  # set by its first state message
        # each model's tokenizer and preparer, made once per worker (a model swapped back in reuses them)
        self._preparers: dict[int, RequestPreparer] = {}
        self._preparers_lock = threading.Lock()
        self.calibrations = list(calibrations)
        for model_index, calibration in enumerate(self.calibrations):
            calibration.on_store = functools.partial(self._share_ranges, model_index)

    def engine(
        self, model_index: int, engine_args: EngineArgs, engine_config: EngineConfig
    ) -> AsyncLLMEngine:
        """The ``AsyncLLMEngine`` of served model ``model_index``, over the engine process (its calibration
        the one this link shares, when given)."""
        thread = self._thread_for(model_index, engine_config)
        calibration = self.calibrations[model_index] if model_index < len(self.calibrations) else None
        return AsyncLLMEngine(
            engine_args, engine_config=engine_config, thread=thread, calibration=calibration
        )

    def _thread_for(self, model_index: int, engine_config: EngineConfig) -> RemoteEngineThread:
        thread = RemoteEngineThread(self, model_index, engine_config)
        self.threads[model_index] = thread
        if model_index < len(self._last_states):  # a worker started while the engine serves: ready at once
            thread.update(self._last_states[model_index])
        return thread

    def preparer(self, model_index: int, model_config: ModelConfig) -> RequestPreparer:
        """Model ``model_index``'s tokenizer and request preparer in this worker (made at the first ask)."""
        with self._preparers_lock:
            preparer = self._preparers.get(model_index)
            if preparer is None:
                tokenizer = Tokenizer.of_model(model_config)
                preparer = self._preparers[model_index] = RequestPreparer(model_config, tokenizer)
                logger.debug("worker %s: model %d's tokenizer made", self.name, model_index)
            return preparer

    def start(self) -> None:
        """Connect (idempotent); the engine process answers with every model's state (``heard``)."""
        if not self._reader.is_alive():
            self._await_handshake()
            self._reader.start()
            self.send(Hello(self.name))

    def _await_handshake(self) -> None:
        """Wait until the answer socket is connected to the engine process (up to ``HANDSHAKE_SECONDS``):
        what the engine process sends at hello (the ranges kept so far) to a socket it does not know yet is
        dropped, and a worker started late would compute them again."""
        monitor, self._handshake = self._handshake, None
        if monitor is None:
            return
        try:
            if not monitor.poll(int(HANDSHAKE_SECONDS * 1000)):
                logger.warning(
                    "worker %s: no connection to the engine process after %.0f s; saying hello anyway",
                    self.name,
                    HANDSHAKE_SECONDS,
                )
        finally:
            self._pull.disable_monitor()
            monitor.close(linger=0)

    def send(self, message: messages.ToEngine) -> None:
        data = messages.encode(message)
        with self._push_lock:
            if not self._closed:
                self._push.send(data)  # copied: zero-copy frames cost more when small

    def close(self) -> None:
        """Say goodbye and close the sockets (the reader thread ends within a poll interval)."""
        with self._push_lock:
            if self._closed:
                return
            self._push.send(messages.encode(Bye(self.name)))
            self._closed = True
        self._push.close(linger=1000)
        if self._reader.is_alive() and threading.current_thread() is not self._reader:
            self._reader.join(2 * POLL_MS / 1000)
        if not self._reader.is_alive():
            self._pull.close(linger=0)
            self._context.term()

    def stats(
        self, observations: list[tuple[str, str, str, str, float]], cache_stats: dict[str, dict[str, float]]
    ) -> HttpStats:
        """This worker's HTTP observations and result caches' counts, with its CPU time so far."""
        return HttpStats(self.name, self.role, time.process_time(), observations, cache_stats)

    def _share_ranges(self, model_index: int, options: PoolingParams, ranges: np.ndarray) -> None:
        """Ranges this worker computed (a first request with options no one had): to the engine process."""
        self.send(Ranges.of(self.name, model_index, options, ranges))

    async def scrape(self, stats: HttpStats) -> bytes:
        """The server's /metrics text, rendered by the engine process (after these HTTP observations)."""
        loop = asyncio.get_running_loop()
        scrape_id = next(self._scrape_ids)
        future: asyncio.Future[bytes] = loop.create_future()
        self._scrapes[scrape_id] = (loop, future)
        try:
            self.send(Scrape(self.name, scrape_id, stats))
            return await asyncio.wait_for(future, timeout=10.0)
        finally:
            self._scrapes.pop(scrape_id, None)

    # ---- the reader thread ------------------------------------------------------------------------------
    def _read(self) -> None:
        name_os_thread()
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
                    self._dispatch(messages.decode_to_worker(data))
            if self._engine_alive is not None and self._engine_alive.fileno() in events:
                # the only writer is the engine process: readable means it closed (it died or ended)
                for thread in self.threads.values():
                    thread.engine_gone(ENGINE_GONE)
                return

    def _dispatch(self, message: messages.ToWorker) -> None:
        if isinstance(message, Answers):
            finished: list[Call] = []
            for answer in message.answers:
                thread = self.threads.get(answer.model)
                call = None if thread is None else thread.take(answer.call_id, answer)
                if call is not None:
                    finished.append(call)
            if finished:
                resolve_calls(finished)
        elif isinstance(message, States):
            self._last_states = message.models
            self.heard.set()
            for model_index, state in enumerate(message.models):
                thread = self.threads.get(model_index)
                if thread is not None:
                    thread.update(state)
        elif isinstance(message, Ranges):
            if message.model < len(self.calibrations):
                self.calibrations[message.model].keep(message.options, message.ranges.array())
        elif isinstance(message, Scraped):
            entry = self._scrapes.get(message.scrape_id)
            if entry is not None:
                loop, future = entry
                loop.call_soon_threadsafe(_resolve, future, message.text)


def _num_chars(prompts: Sequence[Any]) -> int:
    """The text in a call's prompts (texts, ``{"prompt": ...}``, pairs; token ids count nothing)."""
    num_chars = 0
    for prompt in prompts:
        if isinstance(prompt, str):
            num_chars += len(prompt)
        elif isinstance(prompt, dict):
            text = prompt.get("prompt")
            num_chars += len(text) if isinstance(text, str) else 0
        elif isinstance(prompt, tuple):
            num_chars += sum(len(part) for part in prompt if isinstance(part, str))
    return num_chars


def _resolve(future: asyncio.Future[bytes], value: bytes) -> None:
    if not future.done():
        future.set_result(value)


class _RunningForward:
    """``ForwardClock``'s one method, from the engine process's last state message."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def running_seconds(self) -> float:
        return self.seconds


@dataclasses.dataclass
class _Sent:
    """A call in the engine process: which of its requests went there (the others were answered here)."""

    call: Call
    positions: list[int]


class _Outgoing:
    """One ``Submit`` being built: the distinct params, the calls, every ready request's ids."""

    def __init__(self) -> None:
        self.params: list[PoolingParams] = []
        self._params_index: dict[PoolingParams, int] = {}
        self.calls: list[CallIn] = []
        self.requests: list[Request] = []

    def add(self, call_id: int, model: int, call: Call, requests: list[Request]) -> None:
        index = self._params_index.get(call.params)
        if index is None:
            index = self._params_index[call.params] = len(self.params)
            self.params.append(call.params)
        tokenized = [request.tokenize_span is not None for request in requests]
        span = next((request.tokenize_span for request in requests if request.tokenize_span), None)
        prepared = Prepared(
            request_ids=[request.request_id for request in requests],
            num_tokens=[len(request.token_ids) for request in requests],  # type: ignore[arg-type]
            has_type_ids=[request.token_type_ids is not None for request in requests],
            truncated=[request.truncated for request in requests],
            num_unattended_tokens=[request.num_unattended_tokens for request in requests],
            tokenized=tokenized,
            tokenize_span=span,
        )
        self.calls.append(CallIn(call_id, model, index, call.priority, call.arrival_time, prepared))
        self.requests += requests

    def message(self, worker: str) -> Submit:
        num_ids = sum(sum(call.requests.num_tokens) for call in self.calls)
        id_lists = [request.token_ids for request in self.requests if request.token_ids is not None]
        ids = np.fromiter(chain.from_iterable(id_lists), np.int32, num_ids)
        with_types = [r.token_type_ids for r in self.requests if r.token_type_ids is not None]
        type_ids = Array.of(np.fromiter(chain.from_iterable(with_types), np.int32)) if with_types else None
        return Submit(worker, self.params, self.calls, Array.of(ids), type_ids)


class RemoteEngineThread(EngineLifecycle):
    """The ``EngineClient`` of an engine in the engine process (its ``listeners`` stay empty: the engine
    process's metrics observe the engine)."""

    def __init__(self, link: EngineLink, model_index: int, engine_config: EngineConfig) -> None:
        super().__init__()
        self._link = link
        self._model_index = model_index
        self._engine_config = engine_config
        self._lock = threading.Lock()  # state, pending
        self._stopped = threading.Event()
        self._call_ids = itertools.count()
        self._pending: dict[int, _Sent] = {}
        self._call_of_first_request: dict[str, int] = {}  # to abort by request ids
        self._reason = "the model is still loading; retry in a few seconds"
        self._preparer: RequestPreparer | None = None  # this worker's tokenizer, made before it serves
        # large calls being prepared off the event loop, by first request id (abort drops one from here)
        self._preparing: set[str] = set()
        self._preparing_thread: ThreadPoolExecutor | None = None
        self._described: tuple[str, int | None] = ("", None)  # the backend and budget ``info`` says
        self.forward_clock = _RunningForward()

    # ---- what AsyncLLMEngine calls (any thread) ---------------------------------------------------------
    def start(self) -> None:
        """Make the tokenizer now (on the worker's start, before it accepts connections), so that the engine
        process's "ready" makes this worker ready at once: not one worker answering /health 200 while
        another, still loading its tokenizer, answers 503."""
        self._ensure_preparer()
        with self._lock:
            if self.state == EngineState.CREATED:
                self.state = EngineState.LOADING
        self._link.start()

    def _ensure_preparer(self) -> RequestPreparer:
        if self._preparer is None:
            self._preparer = self._link.preparer(self._model_index, self._engine_config.model_config)
        return self._preparer

    def unavailable_reason(self) -> str:
        return "" if self.state == EngineState.READY else self._reason

    def add(self, call: Call) -> None:
        self.add_many([call])

    def add_many(self, calls: Sequence[Call]) -> None:
        """Prepare each call's requests (a call that fails validation fails alone; a request that cannot
        run gets its error output here), then send the ready ones in one message. A call with more text
        than ``MAX_INLINE_CHARS`` is prepared on this model's preparing thread instead, so that its
        tokenizer time does not hold the event loop (the other calls go at once)."""
        with self._lock:
            if self.state == EngineState.FAILED:
                raise EngineDeadError(self._reason)
            if self.state != EngineState.READY or self._preparer is None:
                raise EngineUnavailableError(self._reason)
            large = [call for call in calls if _num_chars(call.prompts) > MAX_INLINE_CHARS]
            for call in large:
                self._preparing.add(call.request_ids[0])
        if large:
            large_ids = {id(call) for call in large}
            calls = [call for call in calls if id(call) not in large_ids]
            if self._preparing_thread is None:
                self._preparing_thread = ThreadPoolExecutor(
                    1, thread_name_prefix="wde-prepare", initializer=name_os_thread
                )
            for call in large:
                self._preparing_thread.submit(self._prepare_off_loop, call)
        self._send(calls)

    def _send(self, calls: Sequence[Call]) -> None:
        outgoing = _Outgoing()
        for call, requests in self._prepare_together(calls):
            sent = self._add_ready(call, requests, outgoing)
            if sent is not None:
                with self._lock:
                    self._register(sent, outgoing.calls[-1].call_id)
        if outgoing.calls:
            self._link.send(outgoing.message(self._link.name))

    def _prepare_together(self, calls: Sequence[Call]) -> list[tuple[Call, list[Request] | None]]:
        """Each call with its prepared requests (None: it failed validation, alone). The calls with the
        same options are prepared as one (one tokenizer call for all their texts: at concurrency 32 a worker
        sends ~7 one-text calls at a time, and a text costs about 2/3 as much in one call of seven as alone);
        a group that fails validation is prepared again call by call, so that only the bad call fails."""
        groups: dict[PoolingParams, list[Call]] = {}
        prepared: dict[int, list[Request] | None] = {}
        for call in calls:
            if call.request_ids:
                groups.setdefault(call.params, []).append(call)
            else:
                prepared[id(call)] = []  # nothing to prepare: answered at once
        for params, group in groups.items():
            if len(group) > 1:
                request_ids = [request_id for call in group for request_id in call.request_ids]
                prompts = [prompt for call in group for prompt in call.prompts]
                try:
                    requests = self._prepare_one(request_ids, prompts, params)
                except Exception:
                    pass  # validation refused one of them: each call on its own, below
                else:
                    start = 0
                    for call in group:
                        prepared[id(call)] = requests[start : start + len(call.request_ids)]
                        start += len(call.request_ids)
                    continue
            for call in group:
                try:
                    prepared[id(call)] = self._prepare_one(call.request_ids, call.prompts, params)
                except Exception as e:  # validation: the call fails alone, as on the engine thread
                    call.fail(e)
                    prepared[id(call)] = None
        return [(call, prepared[id(call)]) for call in calls]

    def _prepare_one(
        self, request_ids: Sequence[str], prompts: Sequence[Any], params: PoolingParams
    ) -> list[Request]:
        assert self._preparer is not None
        return self._preparer.prepare(request_ids, prompts, params)

    def _prepare_off_loop(self, call: Call) -> None:
        """On the preparing thread: prepare and send a large call, unless it is aborted meanwhile."""
        first = call.request_ids[0]
        try:
            outgoing = _Outgoing()
            sent = self._prepare(call, outgoing) if first in self._preparing else None
            with self._lock:
                if sent is None or first not in self._preparing:  # nothing to send, or aborted
                    return
                self._register(sent, outgoing.calls[-1].call_id)
            self._link.send(outgoing.message(self._link.name))
        except Exception as error:  # the link closed meanwhile: the call must not wait forever
            call.fail(error)
        finally:
            with self._lock:
                self._preparing.discard(first)
                self._note_idle()

    def _register(self, sent: _Sent, call_id: int) -> None:
        """(lock held) ``sent`` is in the engine process until its answer (or its abort)."""
        self._pending[call_id] = sent
        self._call_of_first_request[sent.call.request_ids[0]] = call_id

    def _prepare(self, call: Call, outgoing: _Outgoing) -> _Sent | None:
        """Add ``call``'s ready requests to ``outgoing``; None when nothing of it goes to the engine."""
        ((call, requests),) = self._prepare_together([call])
        return self._add_ready(call, requests, outgoing)

    def _add_ready(self, call: Call, requests: list[Request] | None, outgoing: _Outgoing) -> _Sent | None:
        """Answer here the requests that cannot run, add the ready ones to ``outgoing``; None when nothing of
        ``call`` goes to the engine (``requests`` None: the call failed validation, already answered)."""
        if requests is None:
            return None
        positions, ready = [], []
        now = time.monotonic()
        for position, request in enumerate(requests):
            if request.status == RequestStatus.FAILED:
                metrics = RequestMetrics(call.arrival_time, None, now, request.tokenize_span)
                error = request.error or RuntimeError("the request failed without an error")
                call.outputs[position] = ErrorOutput(request.request_id, error, metrics)
                call.num_remaining -= 1
            else:
                positions.append(position)
                ready.append(request)
        if not ready:
            call.resolve()
            return None
        outgoing.add(next(self._call_ids), self._model_index, call, ready)
        return _Sent(call, positions)

    def abort(self, request_ids: list[str]) -> None:
        if not request_ids:
            return
        with self._lock:
            if request_ids[0] in self._preparing:  # not sent yet: it will not be
                self._preparing.discard(request_ids[0])
                self._note_idle()
                return
            call_id = self._call_of_first_request.pop(request_ids[0], None)
            if call_id is None or self._pending.pop(call_id, None) is None:
                return
            self._note_idle()
        self._link.send(Abort(self._link.name, self._model_index, call_id))

    def stop(self, timeout: float | None = None) -> None:
        """This worker takes no more work for the model; its calls still in the engine are answered first
        (up to ``timeout`` s). The engine itself goes on: the engine process stops it."""
        with self._lock:
            if self.state in (EngineState.LOADING, EngineState.READY, EngineState.CREATED):
                self.state = EngineState.DRAINING
                self._reason = "the server is shutting down; retry on another replica"
            idle = not self._pending and not self._preparing
        if not idle:
            self._stopped.wait(timeout)
        with self._lock:
            if self.state != EngineState.FAILED:
                self.state = EngineState.STOPPED
        if self._preparing_thread is not None:
            self._preparing_thread.shutdown(wait=False)
        self._ready.set()
        if all(
            thread.state in (EngineState.STOPPED, EngineState.FAILED)
            for thread in self._link.threads.values()
        ):
            self._link.close()

    # ---- the link's reader thread ---------------------------------------------------------------------
    def take(self, call_id: int, answer: messages.Answer) -> Call | None:
        """The call ``answer`` finishes, its outputs filled in (None: aborted meanwhile); a call the engine
        failed whole is failed here."""
        with self._lock:
            sent = self._pending.pop(call_id, None)
            if sent is not None:
                self._call_of_first_request.pop(sent.call.request_ids[0], None)
            self._note_idle()
        if sent is None:
            return None
        call = sent.call
        if answer.outputs is None:
            call.fail(answer.error.rebuild() if answer.error else RuntimeError("the engine failed the call"))
            return None
        request_ids = [call.request_ids[position] for position in sent.positions]
        outputs = messages.request_outputs(answer.outputs, request_ids)
        for position, output in zip(sent.positions, outputs, strict=True):
            call.outputs[position] = output
        return call

    def _note_idle(self) -> None:
        """(lock held) A draining thread with nothing pending or being prepared lets ``stop`` return."""
        if not self._pending and not self._preparing and self.state == EngineState.DRAINING:
            self._stopped.set()

    def update(self, model_state: ModelState) -> None:
        remote = EngineState(model_state.state)
        self.counts = EngineCounts(model_state.num_waiting, model_state.num_unfinished)
        self.forward_clock.seconds = model_state.forward_seconds
        self.residency = Residency(model_state.loaded, model_state.num_loads)
        if remote == EngineState.READY and (
            self.info is None or (model_state.backend, model_state.max_num_batched_tokens) != self._described
        ):  # first ready, or (re)loaded since (--max-loaded-models): its backend and budget now
            self.info = self._engine_info(model_state)
            self._described = (model_state.backend, model_state.max_num_batched_tokens)
        with self._lock:
            if self.state in (EngineState.STOPPED, EngineState.FAILED):
                return
            if remote == EngineState.FAILED:
                self._fail_all(model_state.reason)
                return
            if self.state == EngineState.DRAINING:
                return
            if remote in (EngineState.READY, EngineState.LOADING):
                self.state = remote
                self._reason = model_state.reason
            elif remote in (EngineState.DRAINING, EngineState.STOPPED):
                self.state = EngineState.DRAINING
                self._reason = model_state.reason or "the server is shutting down; retry on another replica"
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
        sent, self._pending = list(self._pending.values()), {}
        self._call_of_first_request.clear()
        for entry in sent:
            entry.call.fail(EngineDeadError(reason))
        self._stopped.set()
        self._ready.set()
        self._dead.set()

    def _engine_info(self, model_state: ModelState) -> EngineInfo:
        """The engine's config (with the token budget its runner chose) and this worker's tokenizer, the one
        that prepares the requests sent to the engine."""
        engine_config = self._engine_config
        if model_state.max_num_batched_tokens is not None:
            budget, reason = model_state.max_num_batched_tokens, model_state.budget_reason or ""
            scheduler_config = engine_config.scheduler_config.with_budget(budget, reason)
            engine_config = dataclasses.replace(engine_config, scheduler_config=scheduler_config)
        tokenizer = self._ensure_preparer().tokenizer
        return EngineInfo(engine_config, model_state.backend, tokenizer.untruncated())
