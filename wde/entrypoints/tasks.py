"""The doors' task table, and each task operation written once for both front doors.

A task (embed, score) is one ``Task`` entry: the operations a model of that task serves and what to tell a
caller who asks for another (the engine's stage classes for the task are ``wde.engine.workflow.WORKFLOWS``;
both tables have the same keys). The operations (``encode``,
``score``, ``rerank``, ``classify``) are plans: generators that yield ``Submit`` (run these prompts with
these params) or ``Offload`` (a blocking helper call) and receive the results. ``LLM`` drives a plan
inline; ``AsyncLLMEngine`` drives the same plan with awaits (``Offload`` on a worker thread). So the task
logic (pairing rules, cosine scoring with an embedding model, ranking, token caps) exists once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from wde.config import ModelConfig
from wde.engine.errors import (
    InputTooLongError,
    OutputNotSupportedError,
    TaskNotSupportedError,
    raise_for_errors,
)
from wde.entrypoints.long_inputs import Chunker, aggregate_embeddings, aggregate_scores, long_input_mode
from wde.entrypoints.output_precision import CALIBRATED, Calibration, calibration_options, quantize
from wde.entrypoints.scoring import (
    CosinePlan,
    MaxSimPlan,
    cap_document_tokens,
    make_pairs,
    needs_token_cap,
    rank,
    rerank_documents,
)
from wde.inputs import PoolingParams, PromptType, TextPair
from wde.output_kinds import OUTPUT_KINDS
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    MultiVectorOutput,
    RequestOutput,
    RerankResult,
    ScoreOutput,
    SparseEmbeddingOutput,
)


@dataclass(frozen=True)
class Task:
    name: str
    operations: tuple[str, ...]  # what a model of this task serves
    hint: str  # said to a caller who asks for another operation


TASKS: dict[str, Task] = {
    "embed": Task(
        "embed",
        ("encode", "score", "rerank"),
        "it embeds (LLM.encode; POST /embed, /v1/embeddings, or sparse: POST /embed_sparse, token vectors: "
        "POST /embed_all) and scores by similarity (LLM.score, LLM.rerank; POST /rerank, /v1/rerank); load "
        "a cross-encoder to classify pairs",
    ),
    "score": Task(
        "score",
        ("score", "rerank", "classify"),
        "it scores texts and pairs (LLM.score, LLM.rerank; POST /rerank, /v1/rerank, /predict); load an "
        "embedding model for embeddings",
    ),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"no task {name!r}; known: {sorted(TASKS)}")
    return TASKS[name]


def check_output(
    model_config: ModelConfig, output: str | tuple[str, ...] | None, operation: str = "encode"
) -> None:
    """The embedding model produces every kind of ``output`` (None: its default); else an error naming
    what it serves."""
    kinds = (output,) if isinstance(output, str) else tuple(output or ())
    for kind in kinds:
        if kind in model_config.outputs:
            continue
        if kind not in OUTPUT_KINDS:
            raise ValueError(f"output {kind!r} is not one of {', '.join(OUTPUT_KINDS)}")
        served = "; ".join(f"{name} ({OUTPUT_KINDS[name].how_to_ask})" for name in model_config.outputs)
        raise OutputNotSupportedError(
            f"this model ({model_config.architecture}) does not produce {kind} output, which {operation} "
            f"needs; it serves: {served}"
        )


def check_operation(model_config: ModelConfig, operation: str) -> None:
    task = get_task(model_config.task)
    if operation not in task.operations:
        raise TaskNotSupportedError(
            f"this model ({model_config.architecture}) serves task {task.name!r}, "
            f"not {operation!r}: {task.hint}"
        )


# ---- the steps a plan yields ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    """Run one engine request per prompt; the plan receives the outputs in order (errors raised)."""

    prompts: Sequence[Any]
    params: PoolingParams


@dataclass(frozen=True)
class Offload:
    """A blocking helper (a tokenizer pass over many texts): the async door runs it off the event loop."""

    function: Callable[..., Any]
    args: tuple[Any, ...]


Plan = Generator[Submit | Offload, Any, Any]


# ---- the operations -------------------------------------------------------------------------------------
def encode(
    model_config: ModelConfig,
    prompts: Any,
    params: PoolingParams,
    tokenizer: Any = None,
    calibration: Calibration | None = None,
    chunker: Chunker | None = None,
) -> Plan:
    """One embedding per prompt, in order: dense vectors, sparse (token id, weight) pairs, token vectors or
    several of them, as ``params.output`` asks (the model's default when unset). With a ``tokenizer``,
    sparse outputs get the token strings of their ids (``decode``). A ``params.precision`` other than float32
    quantizes dense vectors (int8 / uint8 with the ranges of the ``calibration`` set, embedded once per set
    of options and kept in it; None: the bundled set, for this call alone). Inputs longer than max_model_len
    are cut, refused or, with the ``chunker``, embedded in windows (``long_input``:
    wde/entrypoints/long_inputs.py)."""
    check_operation(model_config, "encode")
    check_output(model_config, params.output)
    precision = params.precision or "float32"
    float_params = _with(params, precision=None)  # the engine (and its cache) run floats
    outputs: list[
        EmbeddingOutput | SparseEmbeddingOutput | MultiVectorOutput | CombinedEmbeddingOutput
    ] = yield from embed(model_config, as_prompt_list(prompts), float_params, chunker)
    if tokenizer is not None and "sparse" in params.output_kinds(model_config):
        yield Offload(decode_tokens, (tokenizer, outputs))
    if precision != "float32":
        ranges = None
        if precision in CALIBRATED:
            ranges = yield from calibrated_ranges(
                model_config, calibration or Calibration.bundled(), float_params
            )
        dense = _dense(outputs, precision)
        quantized = quantize(np.stack([output.embedding for output in dense]), precision, ranges)
        for output, row in zip(dense, quantized, strict=True):
            output.embedding = row
    return outputs


def calibrated_ranges(model_config: ModelConfig, calibration: Calibration, params: PoolingParams) -> Plan:
    """The int8 / uint8 ranges for float requests of ``params``: kept in ``calibration``, else computed from
    its texts' embeddings (``calibration_options``) and kept."""
    options = calibration_options(params, model_config)
    ranges = calibration.ranges(options)
    if ranges is None:
        reference: list[EmbeddingOutput] = yield from embed(model_config, calibration.texts, options, None)
        ranges = calibration.store(options, np.stack([output.embedding for output in reference]))
    return ranges


def calibrate(
    model_config: ModelConfig, calibration: Calibration, option_sets: Sequence[PoolingParams]
) -> Plan:
    """The ranges of each of ``option_sets`` computed and kept, for an engine to do as it loads
    (``output_precision.default_option_sets``); returns how many it computed."""
    num_computed = 0
    for options in option_sets:
        if calibration.ranges(calibration_options(options, model_config)) is None:
            yield from calibrated_ranges(model_config, calibration, options)
            num_computed += 1
    return num_computed


def _with(params: PoolingParams, **changes: Any) -> PoolingParams:
    """``params`` with ``changes``; the same object when they change nothing (``dataclasses.replace`` runs
    the whole ``__init__`` and ``__post_init__``: two per request on the server's hot path)."""
    if all(getattr(params, name) == value for name, value in changes.items()):
        return params
    return dataclasses.replace(params, **changes)


def _dense(outputs: Sequence[RequestOutput], precision: str) -> list[EmbeddingOutput]:
    """The outputs a precision applies to: dense vectors only (PoolingParams.verify refuses it for other
    kinds before anything runs)."""
    dense = [output for output in outputs if isinstance(output, EmbeddingOutput)]
    if len(dense) != len(outputs):
        raise OutputNotSupportedError(f"precision {precision!r} applies to dense output only")
    return dense


def embed(
    model_config: ModelConfig, prompts: list[Any], params: PoolingParams, chunker: Chunker | None
) -> Plan:
    """The engine's outputs for ``prompts``, long ones cut, refused or run in windows as ``long_input``
    asks (windows: dense output only, aggregated per text; token-id inputs run as given)."""
    mode = long_input_mode(params, model_config)
    if mode != "chunk":
        outputs = yield Submit(prompts, _with(params, truncate=mode == "truncate", long_input=None))
        return outputs
    _check_chunkable(model_config, prompts, params, chunker)
    assert chunker is not None  # _check_chunkable
    prompt_name = params.prompt_name or model_config.default_prompt_name
    prompt = model_config.prompts[prompt_name] if prompt_name else ""
    texts = {index: text for index, item in enumerate(prompts) if (text := _text_of(item)) is not None}
    text_windows, text_owners = yield Offload(chunker.text_windows, (list(texts.values()), prompt))
    # every input's windows in input order: a text's from the chunker, token ids as they are
    windows_of: dict[int, list[Any]] = {index: [] for index in range(len(prompts))}
    text_index = list(texts)
    for window, owner in zip(text_windows, text_owners, strict=True):
        windows_of[text_index[owner]].append(window)
    for index, item in enumerate(prompts):
        if index not in texts:
            windows_of[index].append(item)
    windows = [window for index in range(len(prompts)) for window in windows_of[index]]
    owners = [index for index in range(len(prompts)) for _ in windows_of[index]]
    window_params = dataclasses.replace(
        params, normalize=False, dimensions=None, prompt_name=None, truncate=False, long_input=None
    )
    outputs = yield Submit(windows, window_params)
    normalize = model_config.pooling.normalize if params.normalize is None else params.normalize
    return aggregate_embeddings(outputs, owners, len(prompts), params.dimensions, normalize)


def _text_of(prompt: Any) -> str | None:
    text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
    return text if isinstance(text, str) else None


def _check_chunkable(
    model_config: ModelConfig, prompts: list[Any], params: PoolingParams, chunker: Chunker | None
) -> None:
    params.verify(model_config)
    if chunker is None:
        raise ValueError("long_input='chunk' needs the engine's tokenizer (LLM / AsyncLLMEngine pass it)")
    if params.output_kinds(model_config) != ("dense",):
        raise OutputNotSupportedError(
            "long_input='chunk' applies to dense output; cut (truncate) or refuse (error) the long inputs of "
            "other kinds"
        )
    for index, item in enumerate(prompts):
        ids = item.get("prompt_token_ids") if isinstance(item, dict) else None
        if isinstance(ids, list) and len(ids) > model_config.max_model_len:
            raise InputTooLongError(
                f"input {index}: {len(ids)} token ids, more than max_model_len "
                f"({model_config.max_model_len}); long_input='chunk' cuts texts into windows, not token ids: "
                "send the text"
            )


def decode_tokens(tokenizer: Any, outputs: Sequence[SparseEmbeddingOutput | CombinedEmbeddingOutput]) -> None:
    """Fill each sparse output's ``tokens`` with the token strings of its ids (the tokenizer's vocabulary, as
    ``SparseEncoder.decode`` names them)."""
    for output in outputs:
        sparse = output.sparse if isinstance(output, CombinedEmbeddingOutput) else output
        if sparse is not None:
            sparse.tokens = [tokenizer.id_to_token(token_id) for token_id in sparse.indices.tolist()]


def score(
    model_config: ModelConfig, text_1: Any, text_2: Any, params: PoolingParams, chunker: Chunker | None = None
) -> Plan:
    """Scores of (text_1, text_2) pairs, 1:N or N:N: a cross-encoder's classifier, or the cosine similarity
    of an embedding model's embeddings (each distinct text embedded once); a SPLADE model's sparse vectors
    compare by their dot product (its saved similarity_fn_name), as ``SparseEncoder.similarity``. With
    ``long_input='chunk'`` a cross-encoder scores each window of a long text_2 and keeps their ``chunk_score``
    (max by default); an embedding model embeds long texts in windows."""
    check_operation(model_config, "score")
    pairs = make_pairs(text_1, text_2)
    mode = long_input_mode(params, model_config)
    if model_config.task == "score" and mode == "chunk":
        return (yield from _score_windows(model_config, pairs, params, chunker))
    if model_config.task == "score":
        outputs: list[ScoreOutput] = yield Submit(
            pairs, _with(params, truncate=mode == "truncate", long_input=None)
        )
        return outputs
    params.verify(model_config)
    if mode == "chunk" and model_config.outputs[0] != "dense":
        raise OutputNotSupportedError(
            f"long_input='chunk' scores with dense embeddings or a cross-encoder; this model "
            f"({model_config.architecture}) scores {model_config.outputs[0]} output: pass truncate or error"
        )
    params = _with(params, truncate=None if mode == "chunk" else mode == "truncate")
    request_ids = [str(index) for index in range(len(pairs))]
    if model_config.outputs[0] == "multi_vector" and model_config.multi_vector is not None:  # MaxSim
        late = MaxSimPlan.from_pairs(pairs)
        kwargs = {"truncate": params.truncate, "output": "multi_vector", **_truncation(params)}
        queries = yield Submit(late.queries, PoolingParams(**kwargs, input_type="query"))
        documents = yield Submit(late.documents, PoolingParams(**kwargs, input_type="document"))
        return late.scores(queries, documents, request_ids, model_config.multi_vector.similarity)
    plan = CosinePlan.from_pairs(pairs)
    if model_config.outputs[0] == "sparse" and model_config.sparse is not None:  # SPLADE: sparse similarity
        sparse_params = PoolingParams(truncate=params.truncate, output="sparse", **_truncation(params))
        sparse = yield Submit(plan.texts, sparse_params)
        return plan.sparse_scores(sparse, request_ids, model_config.sparse.similarity)
    check_output(model_config, "dense", "cosine scoring")
    dense = PoolingParams(
        normalize=True,
        truncate=params.truncate,
        output="dense",
        long_input=params.long_input,
        **_truncation(params),
    )
    embeddings = yield from embed(model_config, plan.texts, dense, chunker)
    return plan.scores(embeddings, request_ids)


def _truncation(params: PoolingParams) -> dict[str, Any]:
    """The request's truncation options, carried to the embedding calls of a cosine / MaxSim score."""
    return {"truncation_direction": params.truncation_direction, "max_input_tokens": params.max_input_tokens}


def _score_windows(
    model_config: ModelConfig, pairs: list[TextPair], params: PoolingParams, chunker: Chunker | None
) -> Plan:
    """A cross-encoder's scores of pairs whose second text may be long: every window of it scored with the
    first text, the pair's score their ``chunk_score`` (max, mean, first)."""
    params.verify(model_config)
    if chunker is None:
        raise ValueError("long_input='chunk' needs the engine's tokenizer (LLM / AsyncLLMEngine pass it)")
    windows, owners = yield Offload(_pair_windows, (chunker, model_config, pairs, params.instruction))
    window_params = dataclasses.replace(params, truncate=True, long_input=None, chunk_score=None)
    outputs: list[ScoreOutput] = yield Submit(windows, window_params)
    return aggregate_scores(outputs, owners, len(pairs), params.chunk_score or "max")


def _pair_windows(
    chunker: Chunker, model_config: ModelConfig, pairs: list[TextPair], instruction: str | None
) -> tuple[list[TextPair], list[int]]:
    windows: list[TextPair] = []
    owners: list[int] = []
    overheads: dict[str, int] = {}  # a rerank pairs one query with every document: tokenized once
    for owner, (query, document) in enumerate(pairs):
        if query not in overheads:
            overheads[query] = _pair_overhead(chunker, model_config, query, instruction)
        overhead = overheads[query]
        for window in chunker.document_windows(query, document, overhead):
            windows.append((query, window))
            owners.append(owner)
    chunker.check_num_windows(len(windows))  # the request's documents together
    return windows, owners


def _pair_overhead(chunker: Chunker, model_config: ModelConfig, query: str, instruction: str | None) -> int:
    """Tokens of the pair with an empty document: the query, the special tokens or the reranker's template."""
    template = model_config.pair_template
    if template is None:
        return len(chunker.tokenizer.encode(query, "", add_special_tokens=True).ids)
    text = template.format(instruction=instruction or model_config.pair_instruction, query=query, document="")
    return len(chunker.tokenizer.encode(text, add_special_tokens=True).ids)


def rerank(
    model_config: ModelConfig,
    tokenizer: Any,
    query: str,
    documents: Sequence[str],
    params: PoolingParams,
    top_n: int | None = None,
    return_documents: bool = False,
    max_tokens_per_doc: int | None = None,
    chunker: Chunker | None = None,
) -> Plan:
    """(documents sorted by relevance to ``query``, highest first, with their original index; tokens
    processed). ``max_tokens_per_doc`` cuts each document to that many tokens first (``tokenizer``: an
    untruncated tokenizer, needed only then)."""
    check_operation(model_config, "rerank")
    texts = rerank_documents(query, documents, top_n, model_config)
    if needs_token_cap(max_tokens_per_doc, model_config.max_model_len):
        texts = yield Offload(cap_document_tokens, (tokenizer, texts, max_tokens_per_doc))
    scores: list[ScoreOutput] = yield from score(model_config, query, texts, params, chunker)
    ranked: list[RerankResult] = rank(scores, documents, top_n, return_documents)
    return ranked, sum(output.num_tokens for output in scores)


def classify(model_config: ModelConfig, inputs: Sequence[str | TextPair], params: PoolingParams) -> Plan:
    """A classifier's scores (every label) of single texts or (text_1, text_2) pairs, in order."""
    check_operation(model_config, "classify")
    outputs: list[ScoreOutput] = yield Submit(as_prompt_list(inputs), params)
    return outputs


def as_prompt_list(prompts: Any) -> list[PromptType | TextPair]:
    if isinstance(prompts, (str, dict)):
        return [cast(PromptType, prompts)]
    if not isinstance(prompts, Sequence):
        kind = type(prompts).__name__
        raise TypeError(f"texts must be a str or a list of str (or of prompt dicts), got {kind}")
    if len(prompts) == 0:
        raise ValueError("inputs is empty; pass at least one input")
    return list(prompts)


# ---- the drivers: the same loop, inline (LLM) and with awaits (AsyncLLMEngine) -------------------------
Submitter = Callable[[Sequence[Any], PoolingParams], list[RequestOutput]]
AsyncSubmitter = Callable[[Sequence[Any], PoolingParams], Awaitable[list[RequestOutput]]]


def run_plan(plan: Plan, submit: Submitter) -> Any:
    """Drive a plan inline: ``submit`` runs the prompts to completion; offloads run here."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Submit):
                step = plan.send(_checked(submit(step.prompts, step.params)))
            else:
                step = plan.send(step.function(*step.args))
    except StopIteration as done:
        return done.value


async def run_plan_async(plan: Plan, submit: AsyncSubmitter) -> Any:
    """Drive a plan from asyncio: ``submit`` is awaited; offloads run on a worker thread."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Submit):
                step = plan.send(_checked(await submit(step.prompts, step.params)))
            else:
                step = plan.send(await asyncio.to_thread(step.function, *step.args))
    except StopIteration as done:
        return done.value


def _checked(outputs: list[RequestOutput]) -> list[RequestOutput]:
    raise_for_errors(outputs)  # the first failed input, named by its position
    return outputs
