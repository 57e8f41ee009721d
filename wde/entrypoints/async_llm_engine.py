"""``AsyncLLMEngine``: the engine for asyncio callers (the HTTP server).

    engine = AsyncLLMEngine(EngineArgs(model=...))
    engine.start()                      # builds the LLMEngine on the engine thread (state: loading)
    engine.wait_until_ready(timeout=60)
    outputs = await engine.encode(["a text", "another"], normalize=True)
    engine.shutdown()                   # finish accepted work, then stop the thread

The ``LLMEngine`` lives on an ``EngineThread`` and is touched by nothing else; this class only sends it
commands and awaits the answers. A cancelled ``encode`` (client gone) aborts its requests.

Each task operation is a plan in ``wde/entrypoints/tasks.py`` (shared with ``LLM``); a coroutine here only
builds the plan and ``_drive``s it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from typing_extensions import Unpack

from wde.config import EngineConfig
from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.entrypoints import tasks
from wde.entrypoints.calibration_at_load import calibrate_at_load
from wde.entrypoints.call_record import CallObserver, CallRecord
from wde.entrypoints.engine_client import EngineClient
from wde.entrypoints.engine_thread import (
    Call,
    EngineCounts,
    EngineInfo,
    EngineState,
    EngineThread,
    EngineUnavailableError,
    Residency,
    StatsListener,
)
from wde.entrypoints.long_inputs import Chunker
from wde.entrypoints.output_precision import Calibration
from wde.entrypoints.result_reuse import ResultReuse
from wde.entrypoints.task_options import ClassifyOptions, EncodeOptions, ScoreOptions, pooling_params
from wde.entrypoints.tasks import OutputNotSupportedError, TaskNotSupportedError
from wde.inputs import PromptType, TextPair
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    MultiVectorOutput,
    RequestOutput,
    RerankResult,
    ScoreOutput,
    SparseEmbeddingOutput,
)

__all__ = ["AsyncLLMEngine", "OutputNotSupportedError", "TaskNotSupportedError"]

# A call that finds the model loading waits this long for it before its 503. With API workers each hears the
# engine process's "ready" on its own thread, some milliseconds apart under load: without the wait, /health
# answered 200 by one worker could be followed by a 503 "still loading" from the next (seen in CI). A load
# that takes longer still answers 503, this much later.
LOADING_GRACE_SECONDS = 2.0
LOADING_POLL_SECONDS = 0.005


class AsyncLLMEngine:
    def __init__(
        self,
        engine_args: EngineArgs,
        build_engine: Callable[[], LLMEngine] | None = None,
        *,
        engine_config: EngineConfig | None = None,
        thread: EngineClient | None = None,
        calibrate_at_load: bool = False,
        calibration: Calibration | None = None,
    ) -> None:
        """``build_engine`` makes the LLMEngine on the engine thread (default: from ``engine_config``, the
        config already built from ``engine_args`` (``wde serve`` builds each once), else from
        ``engine_args``). ``thread``: the engine's client when it lives elsewhere (an API worker's
        ``RemoteEngineThread``: the engine runs in the engine process; needs ``engine_config``).
        ``calibrate_at_load``: the engine thread computes the int8 / uint8 ranges of requests with no option
        before it says ready (a server's engine: ``calibration_at_load.py``); else on first use.
        ``calibration``: the texts and the ranges already computed, kept by whoever loads the same model
        again (the model registry, across swaps); default: a new one of ``--calibration-file``."""
        self.engine_args = engine_args
        if build_engine is None and engine_config is not None:
            build_engine = functools.partial(LLMEngine.from_engine_config, engine_config)
        self._build = build_engine or functools.partial(LLMEngine.from_engine_args, engine_args)
        self._thread: EngineClient = thread or EngineThread(self._build_engine)
        self._call_counter = itertools.count()
        self._call_observer: CallObserver | None = None  # tracing: sees each submission's outputs
        # engine_args.cache_size > 0: identical inputs run once, earlier results come from the cache (set as
        # the engine is built: it keys by the model's config)
        self.result_reuse: ResultReuse | None = None
        if thread is not None and engine_args.cache_size:
            if engine_config is None:
                raise ValueError("an AsyncLLMEngine over another process's engine needs its engine_config")
            self.result_reuse = ResultReuse(engine_config.model_config, engine_args.cache_size)
        # int8 / uint8 output ranges: of --calibration-file's texts, else of the bundled set
        self.calibration = calibration or Calibration.from_file(engine_args.calibration_file)
        self.calibrate_at_load = calibrate_at_load
        self._chunker_instance: Chunker | None = None
        # calls made during the current event loop iteration, handed to the engine thread together at its
        # end (``_flush_calls``): one hop per iteration, not per call (touched on their event loop only)
        self._calls_to_add: dict[asyncio.AbstractEventLoop, list[Call]] = {}

    # ---- life cycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread, which loads the model; returns at once (idempotent)."""
        self._thread.start()

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Block until the model is loaded; raises the load error, or TimeoutError."""
        self._thread.wait_until_ready(timeout)

    def wait_until_dead(self, timeout: float | None = None) -> bool:
        """Block until the engine has failed for good (True: loading failed or its loop crashed; the
        process must restart) or ``timeout`` seconds passed (False). For a supervising thread."""
        return self._thread.wait_until_dead(timeout)

    def shutdown(self, timeout: float | None = None) -> None:
        """Refuse new work, finish every accepted request, stop the thread. Blocks: from asyncio, run it in
        a worker thread (``await asyncio.to_thread(engine.shutdown)``)."""
        self._thread.stop(timeout)

    @property
    def state(self) -> EngineState:
        return self._thread.state

    @property
    def is_ready(self) -> bool:
        return self._thread.state == EngineState.READY

    @property
    def unavailable_reason(self) -> str:
        """Why the engine takes no work now ("the model is still loading; ..."); empty when ready."""
        return self._thread.unavailable_reason()

    @property
    def info(self) -> EngineInfo:
        """The loaded engine's config, attention backend and a tokenizer copy; raises while loading."""
        info = self._thread.info
        if info is None:
            raise EngineUnavailableError("the model is still loading; retry in a few seconds")
        return info

    async def wait_while_loading(self) -> None:
        """Return once the model is no longer loading, or after ``LOADING_GRACE_SECONDS`` (then a call still
        gets the loading error); at once when it is not loading. Every task coroutine starts with it, and
        so does the server's ``ModelRegistry.hold`` (its routes read ``info`` before they call)."""
        if self._thread.state != EngineState.LOADING:
            return
        deadline = time.monotonic() + LOADING_GRACE_SECONDS
        while self._thread.state == EngineState.LOADING and time.monotonic() < deadline:
            await asyncio.sleep(LOADING_POLL_SECONDS)

    async def _loaded_info(self) -> EngineInfo:
        await self.wait_while_loading()
        return self.info

    @property
    def residency(self) -> Residency | None:
        """For an engine in another process, whether its model is loaded there; None for this process's."""
        return self._thread.residency

    def _build_engine(self) -> LLMEngine:
        """On the engine thread: the LLMEngine, with the result reuse when ``cache_size`` asks for it and the
        default option sets' int8 / uint8 ranges when ``calibrate_at_load`` does."""
        engine = self._build()
        if self.engine_args.cache_size:
            self.result_reuse = ResultReuse(engine.engine_config.model_config, self.engine_args.cache_size)
        if self.calibrate_at_load:
            calibrate_at_load(engine, self.calibration)
        return engine

    def _chunker(self, info: EngineInfo) -> Chunker:
        """long_input="chunk": windows cut with the loaded model's tokenizer (made once)."""
        if self._chunker_instance is None:
            self._chunker_instance = Chunker(info.tokenizer, info.model_config)
        return self._chunker_instance

    # ---- calls made elsewhere (the engine process of ``wde serve --api-workers``) ---------------------
    def submit_calls(self, calls: Sequence[Call]) -> None:
        """Queue calls built by the caller (their futures on the caller's loop) as one command; raises
        ``EngineUnavailableError`` when the engine takes no work now."""
        self._thread.add_many(calls)

    def abort_requests(self, request_ids: list[str]) -> None:
        """Abort requests of a submitted call (never raises)."""
        self._thread.abort(request_ids)

    # ---- observation (metrics, tracing) -------------------------------------------------------------
    def observe_calls(self, observer: CallObserver | None) -> None:
        """Have ``observer(CallRecord)`` called (on the caller's event loop) with the outputs of every
        submission to the engine (their ``metrics`` say when each input arrived, was tokenized, scheduled
        and finished); None stops it. Unobserved (the default), submissions do no extra work."""
        self._call_observer = observer

    @property
    def running_forward_seconds(self) -> float:
        """How long the forward pass running now has taken (0.0 when none runs): a watchdog compares it
        with its limit to tell a wedged engine from a busy one."""
        clock = self._thread.forward_clock
        return 0.0 if clock is None else clock.running_seconds()

    @property
    def counts(self) -> EngineCounts:
        return self._thread.counts

    @property
    def num_waiting(self) -> int:
        """Requests queued in the scheduler (the queue depth)."""
        return self._thread.counts.num_waiting

    @property
    def num_unfinished(self) -> int:
        """Requests accepted and not answered yet."""
        return self._thread.counts.num_unfinished

    def add_stats_listener(self, listener: StatsListener) -> None:
        """``listener.on_step(StepStats)``, ``on_outputs(outputs)`` and ``on_aborted(n)`` are called on the
        engine thread after each step / abort: keep them short and thread-safe (prometheus-client is)."""
        self._thread.listeners = (*self._thread.listeners, listener)

    def remove_stats_listener(self, listener: StatsListener) -> None:
        self._thread.listeners = tuple(item for item in self._thread.listeners if item is not listener)

    # ---- tasks: the plans of wde/entrypoints/tasks.py, driven with awaits --------------------------------
    async def encode(
        self,
        prompts: PromptType | Sequence[PromptType],
        *,
        decode: bool = False,
        **options: Unpack[EncodeOptions],
    ) -> list[EmbeddingOutput | SparseEmbeddingOutput | MultiVectorOutput | CombinedEmbeddingOutput]:
        """One embedding per prompt, in order: dense, sparse, token vectors or several as ``output`` asks
        (the model's kind when unset; ``decode`` adds a sparse output's token strings; ``precision``
        quantizes dense vectors, int8 / uint8 with the calibration set's ranges: ``quantization_ranges``).
        The options: ``EncodeOptions``, as ``LLM.encode``.
        Raises the InputProcessor's ``TypeError`` / ``ValueError`` for bad input,
        ``OutputNotSupportedError`` for an output kind the model lacks, ``InputTooLongError`` for an
        over-long input with truncation off, ``EngineUnavailableError`` while loading or shutting down."""
        params = pooling_params(options, EncodeOptions, "encode")
        info = await self._loaded_info()
        tokenizer = info.tokenizer if decode else None
        plan = tasks.encode(
            info.model_config, prompts, params, tokenizer, self.calibration, self._chunker(info)
        )
        return await self._drive(plan)

    async def quantization_ranges(self, **options: Unpack[EncodeOptions]) -> np.ndarray:
        """The int8 / uint8 ranges ``[2, dim]`` for dense float requests of these options (no
        ``precision``): this engine's, kept since it loaded or an earlier request, else computed from its
        calibration texts now and kept."""
        params = pooling_params(options, EncodeOptions, "quantization_ranges")
        info = await self._loaded_info()
        return await self._drive(tasks.calibrated_ranges(info.model_config, self.calibration, params))

    async def score(
        self, text_1: str | Sequence[str], text_2: str | Sequence[str], **options: Unpack[ScoreOptions]
    ) -> list[ScoreOutput]:
        """Scores of (text_1, text_2) pairs (1:N or N:N, as ``LLM.score``): a cross-encoder's classifier, or
        the cosine similarity of an embedding model's embeddings (each distinct text embedded once).
        The options: ``ScoreOptions``, as ``LLM.score``."""
        params = pooling_params(options, ScoreOptions, "score")
        info = await self._loaded_info()
        return await self._drive(tasks.score(info.model_config, text_1, text_2, params, self._chunker(info)))

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        return_documents: bool = False,
        max_tokens_per_doc: int | None = None,
        **options: Unpack[ScoreOptions],
    ) -> tuple[list[RerankResult], int]:
        """(documents sorted by relevance to ``query``, highest first, with their original ``index``;
        tokens processed). ``max_tokens_per_doc`` cuts each document to that many tokens first;
        ``long_input="chunk"`` scores a long document by its windows (``chunk_score``); the options as
        ``LLM.rerank``."""
        params = pooling_params(options, ScoreOptions, "rerank")
        info = await self._loaded_info()
        plan = tasks.rerank(
            info.model_config,
            info.tokenizer,
            query,
            documents,
            params,
            top_n,
            return_documents,
            max_tokens_per_doc,
            self._chunker(info),
        )
        return await self._drive(plan)

    async def classify(
        self, inputs: Sequence[str | TextPair], **options: Unpack[ClassifyOptions]
    ) -> list[ScoreOutput]:
        """A classifier's scores (every label) of single texts or (text_1, text_2) pairs, in order; the
        options as ``LLM.classify``."""
        params = pooling_params(options, ClassifyOptions, "classify")
        info = await self._loaded_info()
        return await self._drive(tasks.classify(info.model_config, inputs, params))

    async def _drive(self, plan: tasks.Plan) -> Any:
        reuse = self.result_reuse
        submit = self._submit if reuse is None else functools.partial(reuse.submit_async, self._submit)
        return await tasks.run_plan_async(plan, submit)

    async def _submit(self, prompts: Sequence[Any], params: Any) -> list[RequestOutput]:
        """Queue one engine request per prompt and wait for all of them; cancelling aborts them."""
        loop = asyncio.get_running_loop()
        call_id = next(self._call_counter)
        request_ids = [f"{call_id}-{index}" for index in range(len(prompts))]
        future: asyncio.Future[list[RequestOutput]] = loop.create_future()
        call = Call(request_ids, prompts, params, loop, future)
        self._add_soon(loop, call)
        try:
            outputs = await future
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError) and not self._unqueue(loop, call):
                self._thread.abort(request_ids)
            raise
        if self._call_observer is not None:
            self._call_observer(CallRecord(outputs, time.monotonic()))
        return outputs

    def _add_soon(self, loop: asyncio.AbstractEventLoop, call: Call) -> None:
        """Queue ``call`` for the engine at the end of this loop iteration, with the other calls made in it.
        An engine that takes no work raises here, at once, as ``EngineThread.add`` would."""
        reason = self._thread.unavailable_reason()
        if reason:
            self._thread.add(call)  # raises the state's error (dead, loading, draining)
            return
        calls = self._calls_to_add.get(loop)
        if calls is None:
            self._calls_to_add[loop] = calls = []
            loop.call_soon(self._flush_calls, loop)
        calls.append(call)

    def _flush_calls(self, loop: asyncio.AbstractEventLoop) -> None:
        calls = self._calls_to_add.pop(loop, [])
        if not calls:
            return
        try:
            self._thread.add_many(calls)
        except Exception as error:  # e.g. the engine stopped taking work within this iteration: every call
            # gets the error, none waits forever on a future nobody will resolve
            for call in calls:
                call.fail(error)

    def _unqueue(self, loop: asyncio.AbstractEventLoop, call: Call) -> bool:
        """Take a cancelled ``call`` back before its flush (True); False once the engine has it."""
        calls = self._calls_to_add.get(loop)
        if calls is None or call not in calls:
            return False
        calls.remove(call)
        return True
