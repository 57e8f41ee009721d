"""What callers hand the engine: prompts (text or token ids) and per-request pooling parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from typing_extensions import NotRequired


class TextPrompt(TypedDict):
    """A text to embed; ``{"prompt": "..."}``."""

    prompt: str


class TokensPrompt(TypedDict):
    """Already-tokenized input (special tokens included, as the model expects them)."""

    prompt_token_ids: list[int]
    token_type_ids: NotRequired[list[int]]


PromptType = str | TextPrompt | TokensPrompt


@dataclass(frozen=True)
class PoolingParams:
    """Per-request options; ``None`` means "the model's / engine's default"."""

    normalize: bool | None = None
    dimensions: int | None = None
    truncate: bool | None = None
    prompt_name: str | None = None

    def verify(self, hidden_size: int, prompts: dict[str, str]) -> None:
        if self.dimensions is not None:
            if isinstance(self.dimensions, bool) or not isinstance(self.dimensions, int):
                raise TypeError(f"dimensions must be an int, got {type(self.dimensions).__name__}")
            if not 1 <= self.dimensions <= hidden_size:
                raise ValueError(
                    f"dimensions ({self.dimensions}) must be between 1 and the model's "
                    f"hidden size ({hidden_size})"
                )
        if self.prompt_name is not None and self.prompt_name not in prompts:
            known = ", ".join(sorted(prompts)) or "none"
            raise ValueError(
                f"prompt_name {self.prompt_name!r} is not a prompt of this model (known: {known})"
            )
