"""``LLM``: the offline Python API. ``LLM().encode(texts)`` embeds with the bundled default model."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

from wde.engine.errors import raise_for_errors
from wde.engine.llm_engine import LLMEngine
from wde.engine.scoring import CosinePlan, make_pairs, rank, rerank_documents
from wde.engine_args import EngineArgs
from wde.inputs import PoolingParams, PromptType, TextPair
from wde.outputs import EmbeddingOutput, RequestOutput, RerankResult, ScoreOutput


class LLM:
    """Load a model once, then ``encode`` any number of texts.

    ``model`` is a local directory in HuggingFace layout; ``None`` uses the packaged
    sentence-transformers/all-MiniLM-L6-v2. Other keyword arguments are ``EngineArgs`` fields
    (``dtype``, ``device``, ``max_model_len``, ``max_num_batched_tokens``, ``attention_backend``, ...).
    """

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        unknown = set(engine_args) - set(EngineArgs.field_names())
        if unknown:
            raise TypeError(f"unknown engine arguments {sorted(unknown)}; known: {EngineArgs.field_names()}")
        self.engine = LLMEngine.from_engine_args(EngineArgs(model=model, **engine_args))
        self._request_counter = itertools.count()

    @property
    def model_config(self):
        return self.engine.model_config

    def encode(
        self,
        texts: PromptType | Sequence[PromptType],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate: bool | None = None,
        prompt_name: str | None = None,
        batch_size: int | None = None,
        show_progress: bool = False,
    ) -> list[EmbeddingOutput]:
        """Embed ``texts`` (a str, a list of str, or ``{"prompt": ...}`` / ``{"prompt_token_ids": ...}``).

        Returns one ``EmbeddingOutput`` per input, in input order. ``batch_size`` caps the sequences of one
        forward pass (the token budget still applies). Raises ``ValueError`` / ``TypeError`` for bad input
        before anything runs, and ``ValueError`` naming the input when one could not run (too long with
        ``truncate=False``); the engine stays usable either way.
        """
        model_config = self.engine.model_config
        if model_config.task != "embed":
            raise ValueError(
                f"{model_config.architecture} is a cross-encoder: it supports task 'score' "
                "(LLM.score, LLM.rerank), not 'embed'; load an embedding model for encode()"
            )
        prompts = [texts] if isinstance(texts, (str, dict)) else texts
        if not isinstance(prompts, Sequence):
            raise TypeError(f"texts must be a str or a list of str, got {type(texts).__name__}")
        params = PoolingParams(normalize, dimensions, truncate, prompt_name)
        return self._run(prompts, params, batch_size, show_progress)  # type: ignore[return-value]

    def score(
        self,
        text_1: str | Sequence[str],
        text_2: str | Sequence[str],
        *,
        truncate: bool | None = None,
        raw_scores: bool = False,
        instruction: str | None = None,
        batch_size: int | None = None,
        show_progress: bool = False,
    ) -> list[ScoreOutput]:
        """Relevance of (text_1, text_2) pairs: one text_1 against every text_2 (1:N), or pairwise (N:N).

        A cross-encoder returns its classifier's scores after the model's activation (sigmoid for one label,
        like sentence-transformers' CrossEncoder) or the logits with ``raw_scores=True``; an embedding model
        returns the cosine similarity of the two texts' embeddings. An LLM reranker (Qwen3-Reranker) formats
        each pair with its prompt template; ``instruction`` replaces the template's instruction.
        """
        pairs = make_pairs(text_1, text_2)
        params = PoolingParams(truncate=truncate, raw_scores=raw_scores, instruction=instruction)
        if self.engine.model_config.task == "score":
            return self._run(pairs, params, batch_size, show_progress)  # type: ignore[return-value]
        params.verify(self.engine.model_config)
        plan = CosinePlan.from_pairs(pairs)
        embeddings = self.encode(
            plan.texts, normalize=True, truncate=truncate, batch_size=batch_size, show_progress=show_progress
        )
        return plan.scores(embeddings, [str(next(self._request_counter)) for _ in pairs])

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        return_documents: bool = False,
        raw_scores: bool = False,
        truncate: bool | None = None,
        instruction: str | None = None,
        batch_size: int | None = None,
    ) -> list[RerankResult]:
        """Documents sorted by relevance to ``query`` (highest first), each with its original ``index``."""
        texts = rerank_documents(query, documents, top_n, self.engine.model_config)
        scores = self.score(
            query,
            texts,
            truncate=truncate,
            raw_scores=raw_scores,
            instruction=instruction,
            batch_size=batch_size,
        )
        return rank(scores, documents, top_n, return_documents)

    def _run(
        self,
        prompts: Sequence[PromptType | TextPair],
        params: PoolingParams,
        batch_size: int | None,
        show_progress: bool,
    ) -> list[RequestOutput]:
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        request_ids = [str(next(self._request_counter)) for _ in prompts]
        position = {request_id: index for index, request_id in enumerate(request_ids)}
        self.engine.add_requests(request_ids, prompts, params)
        results: list[RequestOutput | None] = [None] * len(prompts)
        with (
            self._max_num_seqs(batch_size),
            tqdm(total=len(prompts), disable=not show_progress, unit="input", desc="encode") as progress,
        ):
            try:
                while self.engine.has_unfinished_requests():
                    for output in self.engine.step():
                        results[position[output.request_id]] = output
                        progress.update(1)
            except BaseException:
                for request_id in request_ids:
                    self.engine.abort_request(request_id)
                raise
        self.engine.on_idle()
        raise_for_errors(results)
        return results  # type: ignore[return-value]

    @contextmanager
    def _max_num_seqs(self, batch_size: int | None):
        if batch_size is None:
            yield
            return
        scheduler = self.engine.scheduler
        saved, scheduler.max_num_seqs = scheduler.max_num_seqs, batch_size
        try:
            yield
        finally:
            scheduler.max_num_seqs = saved
