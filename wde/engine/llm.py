"""``LLM``: the offline Python API. ``LLM().encode(texts)`` embeds with the bundled default model."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.inputs import PoolingParams, PromptType
from wde.outputs import EmbeddingOutput, ErrorOutput, RequestOutput


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
        if self.engine.model_config.task != "embed":
            raise ValueError(
                f"this model ({self.engine.model_config.architecture}) supports task "
                f"{self.engine.model_config.task!r}, not 'embed'"
            )
        prompts = [texts] if isinstance(texts, (str, dict)) else texts
        if not isinstance(prompts, Sequence):
            raise TypeError(f"texts must be a str or a list of str, got {type(texts).__name__}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        params = PoolingParams(normalize, dimensions, truncate, prompt_name)
        outputs = self._run(prompts, params, batch_size, show_progress)
        return outputs  # type: ignore[return-value]

    def _run(
        self,
        prompts: Sequence[PromptType],
        params: PoolingParams,
        batch_size: int | None,
        show_progress: bool,
    ) -> list[RequestOutput]:
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
        errors = [(i, out) for i, out in enumerate(results) if isinstance(out, ErrorOutput)]
        if errors:
            index, first = errors[0]
            raise ValueError(
                f"inputs[{index}]: {first.error}"
                + (f" ({len(errors) - 1} more inputs failed)" if len(errors) > 1 else "")
            ) from first.error
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
