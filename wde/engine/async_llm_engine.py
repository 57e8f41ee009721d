"""``AsyncLLMEngine``: the engine for asyncio callers (the HTTP server).

    engine = AsyncLLMEngine(EngineArgs(model=...))
    engine.start()                      # builds the LLMEngine on the engine thread (state: loading)
    engine.wait_until_ready(timeout=60)
    outputs = await engine.encode(["a text", "another"], PoolingParams())
    engine.shutdown()                   # finish accepted work, then stop the thread

The ``LLMEngine`` lives on an ``EngineThread`` and is touched by nothing else; this class only sends it
commands and awaits the answers. A cancelled ``encode`` (client gone) aborts its requests.

To serve another task, add a coroutine next to ``encode`` that checks the task, calls ``_submit`` with
the task's prompts and params, and raises for errors with ``raise_for_errors``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from wde.engine.engine_thread import (
    Call,
    EngineCounts,
    EngineInfo,
    EngineState,
    EngineThread,
    EngineUnavailableError,
    StatsListener,
)
from wde.engine.errors import raise_for_errors
from wde.engine.llm_engine import LLMEngine
from wde.engine.scoring import CosinePlan, cap_document_tokens, make_pairs, rank, rerank_documents
from wde.engine_args import EngineArgs
from wde.inputs import PoolingParams, PromptType, TextPair
from wde.outputs import EmbeddingOutput, RequestOutput, RerankResult, ScoreOutput

# What a caller can do with a model of each task (HTTP routes first: most callers are HTTP clients).
TASK_HINTS = {
    "embed": "it embeds (POST /embed, /v1/embeddings) and scores by cosine similarity (POST /rerank, "
    "/v1/rerank); load a cross-encoder to classify pairs",
    "score": "it scores texts and pairs (POST /rerank, /v1/rerank, /predict); load an embedding model for "
    "embeddings",
}


class TaskNotSupportedError(ValueError):
    """The loaded model does not serve the task asked for (e.g. embeddings from a cross-encoder)."""


class AsyncLLMEngine:
    def __init__(self, engine_args: EngineArgs, build_engine: Callable[[], LLMEngine] | None = None) -> None:
        """``build_engine`` makes the LLMEngine on the engine thread (default: from ``engine_args``)."""
        self.engine_args = engine_args
        self._thread = EngineThread(build_engine or (lambda: LLMEngine.from_engine_args(engine_args)))
        self._call_counter = itertools.count()

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

    # ---- observation (metrics) ----------------------------------------------------------------------
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

    # ---- tasks --------------------------------------------------------------------------------------
    async def encode(
        self, prompts: PromptType | Sequence[PromptType], params: PoolingParams | None = None
    ) -> list[EmbeddingOutput]:
        """One embedding per prompt, in order. Raises the InputProcessor's ``TypeError`` / ``ValueError``
        for bad input, ``InputTooLongError`` for an over-long input with truncation off,
        ``EngineUnavailableError`` while loading or shutting down."""
        self._check_task("embed")
        outputs = await self._submit(_as_list(prompts), params or PoolingParams())
        raise_for_errors(outputs)
        return outputs  # type: ignore[return-value]

    async def score(
        self,
        text_1: str | Sequence[str],
        text_2: str | Sequence[str],
        *,
        truncate: bool | None = None,
        raw_scores: bool = False,
        instruction: str | None = None,
    ) -> list[ScoreOutput]:
        """Scores of (text_1, text_2) pairs (1:N or N:N, as ``LLM.score``): a cross-encoder's classifier, or
        the cosine similarity of an embedding model's embeddings (each distinct text embedded once)."""
        pairs = make_pairs(text_1, text_2)
        model_config = self.info.model_config
        params = PoolingParams(truncate=truncate, raw_scores=raw_scores, instruction=instruction)
        if model_config.task == "score":
            outputs = await self._submit(pairs, params)
            raise_for_errors(outputs)
            return outputs  # type: ignore[return-value]
        params.verify(model_config)
        plan = CosinePlan.from_pairs(pairs)
        embeddings = await self.encode(plan.texts, PoolingParams(normalize=True, truncate=truncate))
        return plan.scores(embeddings, [str(index) for index in range(len(pairs))])

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        return_documents: bool = False,
        raw_scores: bool = False,
        truncate: bool | None = None,
        max_tokens_per_doc: int | None = None,
        instruction: str | None = None,
    ) -> tuple[list[RerankResult], int]:
        """(documents sorted by relevance to ``query``, highest first, with their original ``index``;
        tokens processed). ``max_tokens_per_doc`` cuts each document to that many tokens first."""
        info = self.info
        texts = rerank_documents(query, documents, top_n, info.model_config)
        if max_tokens_per_doc is not None:  # a tokenizer pass over every document: off the event loop
            texts = await asyncio.to_thread(
                cap_document_tokens,
                info.tokenizer,
                texts,
                max_tokens_per_doc,
                info.model_config.max_model_len,
            )
        scores = await self.score(
            query, texts, truncate=truncate, raw_scores=raw_scores, instruction=instruction
        )
        return rank(scores, documents, top_n, return_documents), sum(score.num_tokens for score in scores)

    async def classify(
        self, inputs: Sequence[str | TextPair], *, truncate: bool | None = None, raw_scores: bool = False
    ) -> list[ScoreOutput]:
        """A classifier's scores (every label) of single texts or (text_1, text_2) pairs, in order."""
        self._check_task("score")
        outputs = await self._submit(
            _as_list(inputs), PoolingParams(truncate=truncate, raw_scores=raw_scores)
        )
        raise_for_errors(outputs)
        return outputs  # type: ignore[return-value]

    def _check_task(self, task: str) -> None:
        model_config = self.info.model_config
        if model_config.task != task:
            raise TaskNotSupportedError(
                f"this model ({model_config.architecture}) serves task {model_config.task!r}, not {task!r}: "
                f"{TASK_HINTS[model_config.task]}"
            )

    async def _submit(self, prompts: Sequence[Any], params: Any) -> list[RequestOutput]:
        """Queue one engine request per prompt and wait for all of them; cancelling aborts them."""
        loop = asyncio.get_running_loop()
        call_id = next(self._call_counter)
        request_ids = [f"{call_id}-{index}" for index in range(len(prompts))]
        call = Call(request_ids, prompts, params, loop, loop.create_future())
        self._thread.add(call)
        try:
            return await call.future
        except asyncio.CancelledError:
            self._thread.abort(request_ids)
            raise


def _as_list(prompts: Any) -> list[Any]:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, Sequence):
        raise TypeError(f"prompts must be a str or a list of str, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("inputs is empty; pass at least one input")
    return list(prompts)
