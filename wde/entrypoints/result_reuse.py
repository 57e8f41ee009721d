"""``ResultReuse``: the engine's front door with ``cache_size`` > 0. Identical inputs of one submission run
once, and inputs answered before come from a ``ResultCache`` without a forward pass.

It wraps a plan's submitter (``LLM`` and ``AsyncLLMEngine`` both: ``tasks.Submit`` steps are the seam, the
plans stay as they are): the inputs become keys, found ones are copied out of the cache, the distinct rest
is submitted, and the outputs are spread back to every position (a duplicate gets its own copy) and kept.

A key is everything that decides an output: the model (path, dtype, quantization, task, lengths, pooling,
activations: ``model_key``), every ``PoolingParams`` field (normalize, dimensions, truncate, prompt name,
instruction, output kinds, max_active_dims, ... whatever the params hold) and the input (the text, the
text pair, or the token ids and token types). ``{"prompt": text}`` and ``text`` are the same input. An input
of any other shape (or params with an unhashable field) turns reuse off for that submission, so that the
engine's own validation answers it; and a submission the engine refuses (ValueError / TypeError naming
``inputs[i]``) is resubmitted as given, so that the error names the caller's positions, not the distinct
inputs'.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wde.config import ModelConfig
from wde.entrypoints.result_cache import MIB, CacheStats, ResultCache, copy_output, size_of
from wde.inputs import PoolingParams
from wde.outputs import ErrorOutput, RequestOutput

if TYPE_CHECKING:
    from wde.entrypoints.tasks import AsyncSubmitter, Submitter

# The ModelConfig fields that change an output (besides the weights the path names).
MODEL_KEY_FIELDS = (
    "model",
    "tokenizer",
    "dtype",
    "quantization",
    "task",
    "max_model_len",
    "truncate",
    "pooling",
    "dense_layers",
    "prompts",
    "default_prompt_name",
    "score_activation",
    "pair_truncation",
    "pair_template",
    "pair_instruction",
    "outputs",
    "sparse",
    "multi_vector",
)


@dataclass(frozen=True)
class ReuseStats(CacheStats):
    num_deduplicated: int  # inputs answered by an identical input of the same submission


@dataclass
class ReusePlan:
    """One submission, split: ``to_run`` (distinct inputs not in the cache, with their keys) and, per input,
    where its output comes from: an index into ``to_run``, or the output the cache gave."""

    to_run: list[Any]
    run_keys: list[tuple[Hashable, int]]  # (key, key_bytes) of each input to run
    sources: list[int | RequestOutput]


class ResultReuse:
    def __init__(self, model_config: ModelConfig, cache_size_mib: float) -> None:
        self.model_config = model_config
        self.model_key = model_key(model_config)
        self.cache = ResultCache(int(cache_size_mib * MIB))
        self.num_deduplicated = 0

    # ---- the two doors ------------------------------------------------------------------------------
    def submit(self, submit: Submitter, prompts: Sequence[Any], params: PoolingParams) -> list[RequestOutput]:
        plan = self.split(prompts, params)
        if plan is None:
            return submit(prompts, params)
        try:
            outputs = submit(plan.to_run, params) if plan.to_run else []
        except (TypeError, ValueError):
            return submit(prompts, params)  # refused: again as given, so the error names the caller's inputs
        return self.join(plan, outputs)

    async def submit_async(
        self, submit: AsyncSubmitter, prompts: Sequence[Any], params: PoolingParams
    ) -> list[RequestOutput]:
        plan = self.split(prompts, params)
        if plan is None:
            return await submit(prompts, params)
        try:
            outputs = await submit(plan.to_run, params) if plan.to_run else []
        except (TypeError, ValueError):
            return await submit(prompts, params)
        return self.join(plan, outputs)

    def stats(self) -> ReuseStats:
        return ReuseStats(**dataclasses.asdict(self.cache.stats()), num_deduplicated=self.num_deduplicated)

    # ---- split and join -------------------------------------------------------------------------------
    def split(self, prompts: Sequence[Any], params: PoolingParams) -> ReusePlan | None:
        """Cache hits, and the distinct inputs to run; None when an input or the params cannot be keyed.
        Raises the engine's own errors for invalid params (before anything is looked up)."""
        params.verify(self.model_config)
        params_key = self.params_key(params)
        try:
            hash(params_key)
        except TypeError:
            return None
        input_keys = [prompt_key(prompt) for prompt in prompts]
        if None in input_keys:
            return None
        params_bytes = size_of(params_key)
        plan = ReusePlan([], [], [])
        position: dict[Hashable, int] = {}  # key -> index in to_run
        for prompt, input_key in zip(prompts, input_keys, strict=True):
            key = (self.model_key, params_key, input_key)
            if key in position:
                plan.sources.append(position[key])
                continue
            cached = self.cache.get(key)
            if cached is not None:
                plan.sources.append(cached)
                continue
            position[key] = len(plan.to_run)
            plan.sources.append(len(plan.to_run))
            plan.to_run.append(prompt)
            plan.run_keys.append((key, sys.getsizeof(key) + params_bytes + size_of(input_key)))
        return plan

    def params_key(self, params: PoolingParams) -> tuple[Any, ...]:
        """Every field of ``params``, with the defaults the engine resolves filled in (so that /embed's
        ``normalize: true`` and /v1/embeddings' unset normalize share entries on a normalizing model):
        truncate (the model's), prompt name (its default prompt), and for embeddings normalize and the output
        kind."""
        model_config = self.model_config
        resolved: dict[str, Any] = {
            "truncate": model_config.truncate if params.truncate is None else params.truncate,
            "prompt_name": params.prompt_name or model_config.default_prompt_name,  # as the RequestProcessor
        }
        if model_config.task == "embed":
            normalize = model_config.pooling.normalize if params.normalize is None else params.normalize
            resolved["normalize"] = normalize
            resolved["output"] = model_config.outputs[0] if params.output is None else params.output
        return tuple(
            resolved.get(field.name, getattr(params, field.name)) for field in dataclasses.fields(params)
        )

    def join(self, plan: ReusePlan, outputs: Sequence[RequestOutput]) -> list[RequestOutput]:
        """Every input's output, in order; the new ones kept (errors are not)."""
        for (key, key_bytes), output in zip(plan.run_keys, outputs, strict=True):
            if not isinstance(output, ErrorOutput):
                self.cache.put(key, output, key_bytes)
        results: list[RequestOutput] = []
        handed_out: set[int] = set()
        for source in plan.sources:
            if not isinstance(source, int):
                results.append(source)
            elif source in handed_out:  # a duplicate: its own copy of the one run
                self.num_deduplicated += 1
                results.append(copy_output(outputs[source]))
            else:
                handed_out.add(source)
                results.append(outputs[source])
        return results


def model_key(model_config: ModelConfig) -> str:
    """The model and every setting of it that changes outputs, as one string (shared by all keys)."""
    return repr(tuple((name, getattr(model_config, name, None)) for name in MODEL_KEY_FIELDS))


def prompt_key(prompt: Any) -> Hashable | None:
    """What identifies an input: its text, ("pair", text_1, text_2), or ("ids", token ids, token types);
    None for anything else (left to the engine's validation)."""
    kind = type(prompt)
    if kind is str:
        return prompt
    if kind is tuple and len(prompt) == 2 and type(prompt[0]) is str and type(prompt[1]) is str:
        return ("pair", prompt[0], prompt[1])
    if kind is not dict:
        return None
    if set(prompt) == {"prompt"} and type(prompt["prompt"]) is str:
        return prompt["prompt"]
    if "prompt_token_ids" in prompt and set(prompt) <= {"prompt_token_ids", "token_type_ids"}:
        token_ids = _int_tuple(prompt["prompt_token_ids"])
        type_ids = prompt.get("token_type_ids")
        type_key = None if type_ids is None else _int_tuple(type_ids)
        if token_ids is None or (type_ids is not None and type_key is None):
            return None
        return ("ids", token_ids, type_key)
    return None


def _int_tuple(values: Any) -> tuple[int, ...] | None:
    """``values`` as a tuple when it is a list or tuple of ints exactly (no bools, floats or subclasses,
    which compare equal to ints but the engine refuses)."""
    if type(values) not in (list, tuple):
        return None
    values = tuple(values)
    return values if all(type(value) is int for value in values) else None
