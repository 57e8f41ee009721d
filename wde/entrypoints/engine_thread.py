"""``EngineThread``: the thread that owns an ``LLMEngine``.

The engine is built on this thread and touched by nothing else. Other threads talk to it only through
``send()``: commands go into a thread-safe queue, which the thread blocks on whenever it has nothing to
run (signal, don't poll). Each submitted call is answered once, when its last request finishes, by
resolving the call's asyncio future on the caller's event loop (``loop.call_soon_threadsafe``).

Hops between threads are per batch, not per request: ``add_many`` queues the calls an event loop gathered
in one iteration as one command (one wake-up of this thread), and the calls a step finishes are answered
with one ``call_soon_threadsafe`` per event loop (one wake-up of that loop).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import tokenizers

from wde.config import EngineConfig
from wde.engine.forward_clock import ForwardClock
from wde.engine.llm_engine import LLMEngine
from wde.engine.stats import StepStats
from wde.outputs import RequestOutput
from wde.request import PRIORITY_INTERACTIVE, Request, submission_priority
from wde.thread_names import name_os_thread

logger = logging.getLogger(__name__)


class EngineState(enum.Enum):
    CREATED = "created"
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"  # finishing accepted work; refusing new work
    STOPPED = "stopped"
    FAILED = "failed"


class EngineUnavailableError(RuntimeError):
    """The engine takes no work now (loading, draining, stopped or failed); retry later or elsewhere."""


class EngineDeadError(EngineUnavailableError):
    """The engine loop crashed; the process needs a restart (its health check says so, and ``wde serve``
    exits non-zero so that its supervisor restarts it). Retrying against this process is pointless."""


@dataclass(frozen=True)
class EngineInfo:
    """What other threads may read about the loaded engine: copied out of the engine thread once."""

    engine_config: EngineConfig
    attention_backend: str
    # An untruncated copy of the engine's tokenizer for callers (/tokenize); never the engine's own object.
    tokenizer: tokenizers.Tokenizer

    @property
    def model_config(self):
        return self.engine_config.model_config


@dataclass(frozen=True)
class EngineCounts:
    """A snapshot published by the engine thread after every loop iteration."""

    num_waiting: int = 0  # queued in the scheduler, not yet in a batch
    num_unfinished: int = 0  # accepted and not answered yet (queued or running)


@dataclass(frozen=True)
class Residency:
    """Whether an engine in another process has its model loaded (the engine process of ``wde serve
    --api-workers`` with --max-loaded-models unloads models and loads them again on demand)."""

    loaded: bool
    num_loads: int  # engines made for the model there


class StatsListener(Protocol):
    """Observes the engine for metrics. Called ON THE ENGINE THREAD: keep it short and thread-safe."""

    def on_step(self, stats: StepStats) -> None: ...

    def on_outputs(self, outputs: Sequence[RequestOutput]) -> None: ...

    def on_aborted(self, num_requests: int) -> None: ...


class CallSink(Protocol):
    """Where calls are answered when no event loop awaits them (the engine process of ``wde serve
    --api-workers``: its output thread). Called on the engine thread: queue, never block."""

    def finished(self, calls: Sequence[Call]) -> None: ...

    def failed(self, call: Call, error: BaseException) -> None: ...


@dataclass(eq=False)
class Call:
    """One submission: many prompts (one engine request each) answered together through one future on the
    caller's event loop, or through a ``sink``."""

    request_ids: list[str]
    prompts: Sequence[Any]
    params: Any
    loop: asyncio.AbstractEventLoop | None  # None with a sink
    future: asyncio.Future[list[RequestOutput]] | None
    outputs: list[RequestOutput | None] = field(default_factory=list)
    num_remaining: int = 0
    priority: int = field(default_factory=submission_priority.get)  # the submitter's (wde.request.priority)
    # when the caller submitted it: the engine thread may apply it a step later (queue metrics, BatchForming)
    arrival_time: float = field(default_factory=time.monotonic)
    # its requests as another process made them ready (``wde.engine.request_preparer``; the engine process
    # of ``wde serve --api-workers``): queued as they are, ``prompts`` unused
    prepared: Sequence[Request] | None = None
    sink: CallSink | None = None

    def __post_init__(self) -> None:
        self.outputs = [None] * len(self.request_ids)
        self.num_remaining = len(self.request_ids)

    def resolve(self) -> None:
        if self.sink is not None:
            self.sink.finished([self])
        else:
            self._call_soon(_set_result, self.future, self.outputs)

    def fail(self, error: BaseException) -> None:
        if self.sink is not None:
            self.sink.failed(self, error)
        else:
            self._call_soon(_set_exception, self.future, error)

    def _call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        assert self.loop is not None  # a call without a sink has its caller's loop
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the caller's event loop is closed: nobody is waiting any more
            logger.debug("dropped the answer to a call whose event loop is closed")


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # the caller may have been cancelled meanwhile
        future.set_result(result)


def _set_results(answers: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, result in answers:
        _set_result(future, result)


def resolve_calls(calls: Sequence[Call]) -> None:
    """Answer finished calls: one ``call_soon_threadsafe`` per event loop (each wakes its loop once), one
    hand-over per sink."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    by_sink: dict[int, tuple[CallSink, list[Call]]] = {}
    for call in calls:
        if call.sink is not None:
            by_sink.setdefault(id(call.sink), (call.sink, []))[1].append(call)
        elif call.loop is not None and call.future is not None:
            by_loop.setdefault(call.loop, []).append((call.future, call.outputs))
    for sink, sunk in by_sink.values():
        sink.finished(sunk)
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_set_results, answers)
        except RuntimeError:  # the callers' event loop is closed: nobody is waiting any more
            logger.debug("dropped the answers to %d calls whose event loop is closed", len(answers))


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


@dataclass(frozen=True)
class AddCommand:
    calls: Sequence[Call]  # submitted together (one event loop iteration's), applied in order


@dataclass(frozen=True)
class AbortCommand:
    request_ids: list[str]


class StopCommand:
    """Finish every accepted request, then end the thread."""


Command = AddCommand | AbortCommand | StopCommand


class EngineLifecycle:
    """What every engine thread ``AsyncLLMEngine`` drives shares (this process's ``EngineThread``, and the
    engine process's stand-in, ``server/engine_link/client.py``'s ``RemoteEngineThread``): the state, what
    the loaded engine is, and the waits for it to be ready or dead."""

    def __init__(self) -> None:
        self._ready = threading.Event()  # set when loading ended: loaded, failed, or stopped first
        self._dead = threading.Event()  # set when the engine fails (to load, or its loop crashed)
        self.state = EngineState.CREATED
        self.info: EngineInfo | None = None
        self.counts = EngineCounts()
        self.error: BaseException | None = None  # why the engine failed
        self.listeners: tuple[StatsListener, ...] = ()  # replaced, never mutated (read by the thread)
        self.residency: Residency | None = None  # None: the engine is this process's own

    def wait_until_ready(self, timeout: float | None = None) -> None:
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the engine was not ready within {timeout} s (state: {self.state.value})")
        if self.state == EngineState.FAILED:
            raise EngineDeadError(f"the engine failed to start: {self.error}") from self.error
        if self.info is None:
            raise EngineUnavailableError("the engine was stopped before it finished loading")

    def wait_until_dead(self, timeout: float | None = None) -> bool:
        """Block until the engine has failed (True) or ``timeout`` seconds passed (False)."""
        return self._dead.wait(timeout)


class EngineThread(EngineLifecycle):
    def __init__(self, build_engine: Callable[[], LLMEngine]) -> None:
        super().__init__()
        self._build_engine = build_engine
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        # Guards ``state`` and the enqueueing of adds, so no add can follow a stop into the queue.
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="wde-engine", daemon=True)
        self.forward_clock: ForwardClock | None = None  # the loaded engine's: how long its forward has run
        self._pending: dict[str, tuple[Call, int]] = {}  # engine thread only

    # ---- any thread ---------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self.state != EngineState.CREATED:
                return
            self.state = EngineState.LOADING
        self._thread.start()

    def add(self, call: Call) -> None:
        self.add_many([call])

    def add_many(self, calls: Sequence[Call]) -> None:
        """Queue ``calls`` as one command: the engine thread wakes once for all of them."""
        with self._lock:
            if self.state == EngineState.FAILED:
                raise EngineDeadError(self.unavailable_reason())
            if self.state != EngineState.READY:
                raise EngineUnavailableError(self.unavailable_reason())
            self._commands.put(AddCommand(calls))

    def unavailable_reason(self) -> str:
        """Why no work is taken now (for 503 answers); the empty string when ready."""
        if self.state == EngineState.READY:
            return ""
        return _unavailable_message(self.state, self.error)

    def abort(self, request_ids: list[str]) -> None:
        """Never raises: aborting after the thread ended is a no-op."""
        self._commands.put(AbortCommand(request_ids))

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new work, finish accepted work, end the thread (waits up to ``timeout`` seconds)."""
        with self._lock:
            if self.state == EngineState.CREATED:
                self.state = EngineState.STOPPED
                self._ready.set()  # nothing will load: release anyone waiting
                return
            if self.state in (EngineState.LOADING, EngineState.READY):
                self.state = EngineState.DRAINING
                self._commands.put(StopCommand())
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the engine did not drain within {timeout} s")

    # ---- engine thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        name_os_thread()
        # 1. build the engine (LOADING -> READY)
        engine = self._load()
        if engine is None:
            return
        # 2. serve commands and step until stopped and drained
        try:
            self._serve(engine)
        except BaseException as e:
            logger.exception("the engine loop crashed; failing every pending request")
            self._fail(e)
        finally:
            engine.shutdown()
            with self._lock:
                if self.state != EngineState.FAILED:
                    self.state = EngineState.STOPPED
            logger.info("engine stopped")

    def _load(self) -> LLMEngine | None:
        try:
            engine = self._build_engine()
            self.info = _engine_info(engine)
            self.forward_clock = engine.forward_clock
        except BaseException as e:
            logger.exception("the engine failed to start")
            self._fail(e)
            self._ready.set()
            return None
        with self._lock:
            if self.state == EngineState.LOADING:
                self.state = EngineState.READY
        self._ready.set()
        return engine

    def _serve(self, engine: LLMEngine) -> None:
        stopping = False
        while not (stopping and not engine.has_unfinished_requests()):
            # 1. commands: block on the queue only when there is nothing to run (idle-mode CUDA graphs are
            #    captured first, one bucket at a time, until a command arrives)
            if not engine.has_unfinished_requests() and engine.has_pending_captures():
                engine.capture_while_idle(self._commands.empty)
            #    Idle, the engine gives back memory large batches left behind; a trim deferred by its rate
            #    limit bounds the wait, so that it still runs if no command comes. Batch work held off for a
            #    likely interactive request (the scheduler's hold-off) waits for one as long as the hold.
            idle = not engine.has_unfinished_requests()
            wait_seconds = engine.on_idle() if idle else engine.hold_seconds()
            block = idle or wait_seconds is not None
            for command in self._take_commands(block=block, timeout=wait_seconds):
                stopping = self._apply(engine, command) or stopping
            self._publish_counts(engine)
            # 2. one step when there is work to run now
            if engine.has_unfinished_requests() and engine.hold_seconds() is None:
                outputs = engine.step()
                # counts and metrics before answering: a caller never sees either older than its answer
                self._publish_counts(engine)
                self._notify(engine.last_step_stats, outputs)
                self._deliver(outputs)

    def _publish_counts(self, engine: LLMEngine) -> None:
        self.counts = EngineCounts(engine.num_waiting, engine.get_num_unfinished_requests())

    def _take_commands(self, block: bool, timeout: float | None = None) -> list[Command]:
        """Every queued command; with ``block``, wait for one first (up to ``timeout`` s, None: forever)."""
        commands: list[Command] = []
        if block:
            try:
                commands.append(self._commands.get(timeout=timeout))
            except queue.Empty:
                return commands
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    def _apply(self, engine: LLMEngine, command: Command) -> bool:
        """Apply one command; True for a stop."""
        if isinstance(command, StopCommand):
            return True
        if isinstance(command, AbortCommand):
            self._abort(engine, command.request_ids)
            return False
        for call in command.calls:
            self._add_call(engine, call)
        return False

    def _add_call(self, engine: LLMEngine, call: Call) -> None:
        if not call.request_ids:
            call.resolve()
            return
        # only a lowered priority is passed on: stand-in engines in tests take no priority
        priority = {"priority": call.priority} if call.priority != PRIORITY_INTERACTIVE else {}
        try:
            if call.prepared is not None:
                engine.add_prepared(call.prepared)
            else:
                engine.add_requests(
                    call.request_ids, call.prompts, call.params, arrival_time=call.arrival_time, **priority
                )
        except Exception as e:  # validation: the call fails alone, the queue is untouched
            call.fail(e)
            return
        for index, request_id in enumerate(call.request_ids):
            self._pending[request_id] = (call, index)

    def _abort(self, engine: LLMEngine, request_ids: list[str]) -> None:
        num_aborted = 0
        for request_id in request_ids:
            if self._pending.pop(request_id, None) is not None and engine.abort_request(request_id):
                num_aborted += 1
        if num_aborted:
            for listener in self.listeners:
                _safely(listener.on_aborted, num_aborted)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        finished: list[Call] = []
        for output in outputs:
            entry = self._pending.pop(output.request_id, None)
            if entry is None:
                continue
            call, index = entry
            call.outputs[index] = output
            call.num_remaining -= 1
            if call.num_remaining == 0:
                finished.append(call)
        if finished:
            resolve_calls(finished)

    def _notify(self, stats: StepStats | None, outputs: list[RequestOutput]) -> None:
        for listener in self.listeners:
            if stats is not None:
                _safely(listener.on_step, stats)
            if outputs:
                _safely(listener.on_outputs, outputs)

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            self.state = EngineState.FAILED
            self.error = error
        dead = EngineDeadError(f"the engine loop stopped: {error!r}; restart the server")
        for call in {id(call): call for call, _ in self._pending.values()}.values():
            call.fail(dead)
        self._pending.clear()
        for command in self._take_commands(block=False):
            if isinstance(command, AddCommand):
                for call in command.calls:
                    call.fail(dead)
        self._dead.set()


def _engine_info(engine: LLMEngine) -> EngineInfo:
    backend_name = engine.runner.attn_backend_cls.name
    return EngineInfo(engine.engine_config, backend_name, engine.tokenizer.untruncated())


def _safely(callback: Callable[..., None], *args: Any) -> None:
    try:
        callback(*args)
    except Exception:  # a metrics bug must not take the engine down
        logger.exception("stats listener %r failed", callback)


def _unavailable_message(state: EngineState, error: BaseException | None) -> str:
    if state in (EngineState.CREATED, EngineState.LOADING):
        return "the model is still loading; retry in a few seconds"
    if state == EngineState.FAILED:
        return f"the engine is dead ({error!r}) and takes no more work; the process must be restarted"
    return "the engine is shutting down; retry on another replica"
