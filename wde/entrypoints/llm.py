"""``LLM``: the offline Python API. ``LLM().encode(texts)`` embeds with the bundled default model."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm
from typing_extensions import Unpack

from wde.engine.llm_engine import LLMEngine
from wde.engine_args import EngineArgs
from wde.entrypoints import tasks
from wde.entrypoints.long_inputs import Chunker
from wde.entrypoints.output_precision import Calibration
from wde.entrypoints.result_reuse import ResultReuse
from wde.entrypoints.task_options import ClassifyOptions, EncodeOptions, ScoreOptions, pooling_params
from wde.inputs import PoolingParams, PromptType, TextPair
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    MultiVectorOutput,
    RequestOutput,
    RerankResult,
    ScoreOutput,
    SparseEmbeddingOutput,
)


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
        args = EngineArgs(model=model, **engine_args)
        self.engine = LLMEngine.from_engine_args(args)
        self._request_counter = itertools.count()
        # cache_size > 0: identical inputs run once, earlier results come from the cache
        self.result_reuse = ResultReuse(self.model_config, args.cache_size) if args.cache_size else None
        # int8 / uint8 output ranges: of calibration_file's texts, else of the bundled set (on first use)
        self.calibration = Calibration.from_file(args.calibration_file)
        self.chunker = Chunker(self.engine.tokenizer.untruncated(), self.model_config)  # long_input="chunk"

    @property
    def model_config(self):
        return self.engine.model_config

    def encode(
        self,
        texts: PromptType | Sequence[PromptType],
        *,
        decode: bool = False,
        batch_size: int | None = None,
        show_progress: bool = False,
        **options: Unpack[EncodeOptions],
    ) -> list[EmbeddingOutput | SparseEmbeddingOutput | MultiVectorOutput | CombinedEmbeddingOutput]:
        """Embed ``texts`` (a str, a list of str, or ``{"prompt": ...}`` / ``{"prompt_token_ids": ...}``).

        Returns one output per input, in input order: an ``EmbeddingOutput`` (``output="dense"``), a
        ``SparseEmbeddingOutput`` (``output="sparse"``: the non-zero token ids and weights, the
        ``max_active_dims`` largest when given; ``decode=True`` adds the token strings) or a
        ``MultiVectorOutput`` (``output="multi_vector"``: one vector per scored token; ``input_type="query"``
        encodes a late-interaction model's query side). ``precision`` (int8, uint8, binary, ubinary)
        quantizes dense vectors as sentence-transformers' ``quantize_embeddings`` (int8 / uint8 ranges from
        the ``calibration_file`` texts, else from wde's bundled sentences). Several kinds at once
        (``output=["dense", "sparse", "multi_vector"]`` on BGE-M3) run one forward pass and give a
        ``CombinedEmbeddingOutput`` each.
        Unset, ``output`` is the model's own kind (``model_config.outputs[0]``). ``batch_size`` caps the
        sequences of one forward pass (the token budget still applies). Raises ``ValueError`` /
        ``TypeError`` for bad input before anything runs (``OutputNotSupportedError`` names the kinds the
        model serves), and ``ValueError`` naming the input when one could not run (too long with
        ``truncate=False``); the engine stays usable either way. ``truncation_direction="left"`` keeps the
        end of an over-long input; ``max_input_tokens`` cuts every input to that many tokens.
        The options (``normalize``, ``dimensions``, ``truncate``, ``prompt_name``, ``output``,
        ``max_active_dims``, ``input_type``, ``precision``, ``long_input``, ``truncation_direction``,
        ``max_input_tokens``): ``EncodeOptions``.
        """
        params = pooling_params(options, EncodeOptions, "encode")
        tokenizer = self.engine.tokenizer.untruncated() if decode else None
        plan = tasks.encode(self.model_config, texts, params, tokenizer, self.calibration, self.chunker)
        return self._drive(plan, batch_size, show_progress)

    def score(
        self,
        text_1: str | Sequence[str],
        text_2: str | Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        **options: Unpack[ScoreOptions],
    ) -> list[ScoreOutput]:
        """Relevance of (text_1, text_2) pairs: one text_1 against every text_2 (1:N), or pairwise (N:N).

        A cross-encoder returns its classifier's scores after the model's activation (sigmoid for one label,
        like sentence-transformers' CrossEncoder) or the logits with ``raw_scores=True``; an embedding model
        returns the cosine similarity of the two texts' embeddings. An LLM reranker (Qwen3-Reranker) formats
        each pair with its prompt template; ``instruction`` replaces the template's instruction.
        ``long_input="chunk"`` scores a long text_2 by its windows (``chunk_score``: max, mean, first).
        ``truncation_direction="left"`` keeps the end of an over-long pair; ``max_input_tokens`` cuts each
        pair to that many tokens (vLLM's ``truncate_prompt_tokens``). The options: ``ScoreOptions``.
        """
        params = pooling_params(options, ScoreOptions, "score")
        plan = tasks.score(self.model_config, text_1, text_2, params, self.chunker)
        return self._drive(plan, batch_size, show_progress)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        return_documents: bool = False,
        max_tokens_per_doc: int | None = None,
        batch_size: int | None = None,
        **options: Unpack[ScoreOptions],
    ) -> list[RerankResult]:
        """Documents sorted by relevance to ``query`` (highest first), each with its original ``index``;
        ``max_tokens_per_doc`` cuts each document to that many tokens first (Cohere's cap);
        ``long_input="chunk"`` scores a long document by its windows (``chunk_score``: max, mean, first);
        the options as in ``score``."""
        params = pooling_params(options, ScoreOptions, "rerank")
        plan = tasks.rerank(
            self.model_config,
            self.engine.tokenizer.untruncated(),
            query,
            documents,
            params,
            top_n,
            return_documents,
            max_tokens_per_doc,
            self.chunker,
        )
        results, _ = self._drive(plan, batch_size, show_progress=False)
        return results

    def classify(
        self,
        inputs: str | TextPair | Sequence[str | TextPair],
        *,
        batch_size: int | None = None,
        **options: Unpack[ClassifyOptions],
    ) -> list[ScoreOutput]:
        """A classifier's scores (every label, after the model's activation unless ``raw_scores``) of single
        texts or (text_1, text_2) pairs, in order; the options (``truncate``, ``raw_scores``,
        ``truncation_direction``, ``max_input_tokens``) as in ``score``."""
        prompts = [inputs] if isinstance(inputs, (str, tuple)) else inputs
        params = pooling_params(options, ClassifyOptions, "classify")
        return self._drive(tasks.classify(self.model_config, prompts, params), batch_size, False)

    def _drive(self, plan: tasks.Plan, batch_size: int | None, show_progress: bool) -> Any:
        run = functools.partial(self._run, batch_size=batch_size, show_progress=show_progress)
        submit = run if self.result_reuse is None else functools.partial(self.result_reuse.submit, run)
        return tasks.run_plan(plan, submit)

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
