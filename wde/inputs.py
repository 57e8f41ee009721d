"""What callers hand the engine: prompts (text, text pairs or token ids) and per-request parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from typing_extensions import NotRequired

from wde.config import CHUNK_SCORE_NAMES, INPUT_TYPE_NAMES, LONG_INPUT_MODE_NAMES, PRECISION_NAMES
from wde.output_kinds import OUTPUT_KINDS
from wde.tokenizer import TRUNCATION_DIRECTIONS, Truncation

if TYPE_CHECKING:
    from wde.config import ModelConfig


class TextPrompt(TypedDict):
    """A text to embed; ``{"prompt": "..."}``."""

    prompt: str


class TokensPrompt(TypedDict):
    """Already-tokenized input (special tokens included, as the model expects them)."""

    prompt_token_ids: list[int]
    token_type_ids: NotRequired[list[int]]


PromptType = str | TextPrompt | TokensPrompt
# A (query, document) pair for cross-encoders, tokenized together as the model's tokenizer does for pairs.
TextPair = tuple[str, str]


@dataclass(frozen=True)
class PoolingParams:
    """Per-request options; ``None`` means "the model's / engine's default"."""

    normalize: bool | None = None
    dimensions: int | None = None
    truncate: bool | None = None
    # also picks a LoRA task adapter named like it (Jina v3: ModelConfig.task_adapters)
    prompt_name: str | None = None
    raw_scores: bool = False  # score task: return logits instead of activated scores
    instruction: str | None = None  # score task of an LLM reranker: its template's {instruction}
    # embed task: "dense" (a pooled vector), "sparse" (vocabulary weights), "multi_vector" (token vectors),
    # or a tuple of several (one forward pass, a {kind: output} each); None: the model's first kind
    output: str | tuple[str, ...] | None = None
    max_active_dims: int | None = None  # sparse output: keep the largest weights only (None: the model's)
    # multi-vector output of a late-interaction model: encode as a "query" or a "document" (the default)
    input_type: str | None = None
    # dense output quantized as sentence-transformers' quantize_embeddings: float32 (None), int8, uint8,
    # binary, ubinary (wde.entrypoints.output_precision)
    precision: str | None = None
    # an input over max_model_len: "truncate", "error" or "chunk" (None: from truncate, else the engine's);
    # a chunked document's rerank score from its windows': "max" (None), "mean", "first"
    long_input: str | None = None
    chunk_score: str | None = None
    # an over-long input loses its end ("right") or its start ("left": TEI's truncation_direction Left);
    # max_input_tokens cuts every input to that many tokens, special tokens included (vLLM's
    # truncate_prompt_tokens; None: max_model_len)
    truncation_direction: str = "right"
    max_input_tokens: int | None = None

    def truncation(self, max_model_len: int) -> Truncation | None:
        """How the tokenizer cuts this request's inputs, when not the engine's default (right, at
        max_model_len)."""
        max_length = max_model_len if self.max_input_tokens is None else self.max_input_tokens
        if max_length == max_model_len and self.truncation_direction == "right":
            return None
        return Truncation(max_length, self.truncation_direction)

    def kinds(self, default: str) -> tuple[str, ...]:
        """The output kinds asked for, in order (``default``: the model's first kind)."""
        if self.output is None:
            return (default,)
        return (self.output,) if isinstance(self.output, str) else tuple(self.output)

    def output_kinds(self, model_config: ModelConfig) -> tuple[str, ...]:
        return self.kinds(model_config.outputs[0])

    def output_kind(self, model_config: ModelConfig) -> str:
        """The single output kind asked for (the first when several are)."""
        return self.output_kinds(model_config)[0]

    def _verify_task_adapter(self, model_config: ModelConfig) -> None:
        """A ``prompt_name`` named after a LoRA task adapter (Jina v3's ``lora_adaptations``) runs with that
        adapter (``ModelConfig.task_adapters``); where the checkpoint has no LoRA weights it would get the
        task's prompt on the base weights, so it is refused."""
        if model_config.task_adapters is not None:
            return
        if self.prompt_name in (model_config.hf_config.get("lora_adaptations") or ()):
            raise ValueError(
                f"prompt_name {self.prompt_name!r} names a task adapter of config.json's lora_adaptations, "
                "but this checkpoint has no LoRA weights (it serves the base weights to every request); "
                "serve a checkpoint with its adapters (parametrizations...lora_A / lora_B), or leave "
                "prompt_name out"
            )

    def verify(self, model_config: ModelConfig) -> None:
        self._verify_output(model_config)
        self._verify_long_input()
        self._verify_truncation(model_config)
        if self.dimensions is not None:
            if isinstance(self.dimensions, bool) or not isinstance(self.dimensions, int):
                raise TypeError(f"dimensions must be an int, got {type(self.dimensions).__name__}")
            embedding_size = model_config.embedding_size  # after the model's Dense modules, if any
            if not 1 <= self.dimensions <= embedding_size:
                size_name = "embedding size" if model_config.dense_layers else "hidden size"
                raise ValueError(
                    f"dimensions ({self.dimensions}) must be between 1 and the model's "
                    f"{size_name} ({embedding_size})"
                )
        self._verify_task_adapter(model_config)
        prompts = model_config.prompts
        if self.prompt_name is not None and self.prompt_name not in prompts:
            known = ", ".join(sorted(prompts)) or "none"
            raise ValueError(
                f"prompt_name {self.prompt_name!r} is not a prompt of this model (known: {known})"
            )
        for name in ("normalize", "raw_scores"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        if model_config.task == "score" and (self.dimensions is not None or self.normalize is not None):
            raise ValueError(
                f"{model_config.architecture} is a cross-encoder (task 'score'): it returns scores, "
                "so normalize and dimensions do not apply"
            )
        if self.instruction is not None and not isinstance(self.instruction, str):
            raise TypeError(f"instruction must be a str, got {type(self.instruction).__name__}")
        takes_instruction = model_config.task == "score" and model_config.pair_template is not None
        if self.instruction is not None and not takes_instruction:
            raise ValueError(
                f"{model_config.architecture} does not take an instruction (only an LLM reranker served with "
                "task 'score' formats pairs with one)"
            )
        if model_config.task == "embed" and self.raw_scores:
            raise ValueError(
                f"{model_config.architecture} is an embedding model (task 'embed'): it has no classifier "
                "logits; raw_scores needs a cross-encoder (supported tasks here: embed, cosine score)"
            )

    def _verify_truncation(self, model_config: ModelConfig) -> None:
        if self.truncation_direction not in TRUNCATION_DIRECTIONS:
            raise ValueError(
                f"truncation_direction {self.truncation_direction!r} is not one of "
                f"{', '.join(TRUNCATION_DIRECTIONS)}"
            )
        max_tokens = self.max_input_tokens
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValueError(f"max_input_tokens must be a positive int or None, got {max_tokens!r}")
        if max_tokens is not None and max_tokens > model_config.max_model_len:
            raise ValueError(
                f"max_input_tokens ({max_tokens}) is more than max_model_len ({model_config.max_model_len}); "
                "pass at most max_model_len (or -1 / null for max_model_len)"
            )
        if self.truncation_direction == "left" and model_config.pair_template is not None:
            raise ValueError(
                f"truncation_direction 'left' is not supported for {model_config.architecture}: an LLM "
                "reranker's prompt template would lose its instruction; truncate from the right (the "
                "document's end is cut, the template's closing prompt kept)"
            )

    def _verify_long_input(self) -> None:
        if self.long_input is not None and self.long_input not in LONG_INPUT_MODE_NAMES:
            raise ValueError(
                f"long_input {self.long_input!r} is not one of {', '.join(LONG_INPUT_MODE_NAMES)}"
            )
        if self.chunk_score is not None and self.chunk_score not in CHUNK_SCORE_NAMES:
            raise ValueError(f"chunk_score {self.chunk_score!r} is not one of {', '.join(CHUNK_SCORE_NAMES)}")

    def _verify_output(self, model_config: ModelConfig) -> None:
        """The output kind is known and the options fit it (whether the model serves it is the task's check,
        which names what it serves)."""
        if self.output is not None and not isinstance(self.output, (str, tuple)):
            raise TypeError(f"output must be a str or a tuple of str, got {type(self.output).__name__}")
        kinds = self.output_kinds(model_config)
        unknown = [kind for kind in kinds if kind not in OUTPUT_KINDS]
        if unknown or not kinds or len(set(kinds)) != len(kinds):
            raise ValueError(
                f"output {self.output!r} must be one or more distinct kinds of {', '.join(OUTPUT_KINDS)}"
            )
        if self.input_type is not None and self.input_type not in INPUT_TYPE_NAMES:
            raise ValueError(f"input_type {self.input_type!r} is not one of {', '.join(INPUT_TYPE_NAMES)}")
        if self.max_active_dims is not None and (
            isinstance(self.max_active_dims, bool)
            or not isinstance(self.max_active_dims, int)
            or self.max_active_dims < 1
        ):
            raise ValueError(f"max_active_dims must be a positive int, got {self.max_active_dims!r}")
        if "dense" not in kinds and (self.dimensions is not None or self.normalize is not None):
            raise ValueError(
                f"dimensions and normalize apply to dense output, not to {' + '.join(kinds)} output (sparse "
                "vectors are pruned with max_active_dims)"
            )
        if self.precision is not None and self.precision not in PRECISION_NAMES:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISION_NAMES)}")
        if self.precision not in (None, "float32") and kinds != ("dense",):
            raise ValueError(f"precision applies to dense output only, not to {' + '.join(kinds)} output")
        if "sparse" not in kinds and self.max_active_dims is not None:
            raise ValueError(f"max_active_dims applies to sparse output, not to {' + '.join(kinds)} output")
