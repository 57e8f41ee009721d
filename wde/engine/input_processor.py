"""Cheap validation of caller inputs, before anything is queued. Never tokenizes.

Every input of a call is checked before any becomes a ``Request``, so a bad input fails its call
alone and leaves the engine as it was. Errors name the input's position and the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from wde.config import ModelConfig
from wde.engine.errors import InputTooLongError
from wde.inputs import PoolingParams
from wde.request import Request

# A text longer than this is refused before tokenization (about 4,000x the default 256-token window).
MAX_INPUT_CHARS = 1_000_000


def _type_name(value: Any) -> str:
    return type(value).__name__


class InputProcessor:
    """Turns ``str | TextPrompt | TokensPrompt`` inputs into ``Request`` objects."""

    def __init__(self, model_config: ModelConfig, max_input_chars: int = MAX_INPUT_CHARS) -> None:
        self.model_config = model_config
        self.max_input_chars = max_input_chars
        # 0 (DeBERTa-v3: no token-type table) takes segment 0 only, like 1
        self.type_vocab_size = max(1, int(model_config.hf_config.get("type_vocab_size", 1)))

    # 1. public entry ---------------------------------------------------------------------------
    def process(
        self, request_ids: Sequence[str], prompts: Sequence[Any], params: PoolingParams
    ) -> list[Request]:
        params.verify(self.model_config)
        if len(request_ids) != len(prompts):
            raise ValueError(f"got {len(request_ids)} request ids for {len(prompts)} inputs")
        truncate = self.model_config.truncate if params.truncate is None else params.truncate
        if not isinstance(truncate, bool):
            raise TypeError(f"truncate must be a bool, got {_type_name(truncate)}")
        requests = [
            self._make_request(request_id, position, prompt, params, truncate)
            for position, (request_id, prompt) in enumerate(zip(request_ids, prompts, strict=True))
        ]
        self._check_vocabulary(requests)
        return requests

    # 2. one input --------------------------------------------------------------------------------
    def _make_request(
        self, request_id: str, position: int, prompt: Any, params: PoolingParams, truncate: bool
    ) -> Request:
        request = Request(request_id=request_id, params=params, truncate=truncate)
        if isinstance(prompt, str):
            request.text = self._check_text(position, prompt)
        elif isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            request.token_ids = self._check_token_ids(position, prompt["prompt_token_ids"], truncate)
            type_ids = prompt.get("token_type_ids")
            if type_ids is not None:
                request.token_type_ids = self._check_type_ids(position, type_ids, len(request.token_ids))
        elif isinstance(prompt, dict) and "prompt" in prompt:
            request.text = self._check_text(position, prompt["prompt"], field="prompt")
        else:
            hint = (
                " (nested lists are not inputs; pass one str per input)" if isinstance(prompt, list) else ""
            )
            raise TypeError(
                f"inputs[{position}]: expected a str, {{'prompt': str}} or "
                f"{{'prompt_token_ids': list[int]}}, got {describe(prompt)}{hint}"
            )
        return request

    # 3. checks -----------------------------------------------------------------------------------
    def _check_text(self, position: int, text: Any, field: str | None = None) -> str:
        where = f"inputs[{position}]" + (f".{field}" if field else "")
        if not isinstance(text, str):
            raise TypeError(f"{where}: expected a str, got {describe(text)}")
        if len(text) > self.max_input_chars:
            raise ValueError(
                f"{where}: text has {len(text)} characters, more than the limit of {self.max_input_chars}"
            )
        if not text.isascii():
            _check_unicode(where, text)
        return text

    def _check_token_ids(self, position: int, token_ids: Any, truncate: bool) -> list[int]:
        where = f"inputs[{position}].prompt_token_ids"
        if not isinstance(token_ids, (list, tuple)):
            raise TypeError(f"{where}: expected a list of int, got {describe(token_ids)}")
        if len(token_ids) == 0:
            raise ValueError(f"{where}: is empty; pass at least one token id")
        if set(map(type, token_ids)) != {int}:  # the range: for the whole call at once (_check_vocabulary)
            _check_int_range(where, token_ids, self.model_config.vocab_size, "token id", "the vocabulary ")
        max_model_len = self.model_config.max_model_len
        if len(token_ids) > max_model_len and not truncate:
            raise InputTooLongError(
                f"{where}: {len(token_ids)} tokens is more than max_model_len ({max_model_len}) "
                "and truncation is off; shorten the input or pass truncate=True"
            )
        return token_ids if isinstance(token_ids, list) else list(token_ids)

    def _check_vocabulary(self, requests: list[Request]) -> None:
        """Every given token id inside the vocabulary: one vectorized range check over the call's ids; the
        per-input walk runs only to name the first bad one. Each request then holds a view of the checked
        array, which the batch concatenates without walking the ids again."""
        given = [request for request in requests if request.token_ids is not None]
        if not given:
            return
        vocab_size = self.model_config.vocab_size
        id_lists = [request.token_ids for request in given]
        lens = list(map(len, id_lists))  # type: ignore[arg-type]
        try:
            flat = np.fromiter(chain.from_iterable(id_lists), np.int64, sum(lens))  # type: ignore[arg-type]
            if flat.min() >= 0 and flat.max() < vocab_size:
                start = 0
                for request, num_ids in zip(given, lens, strict=True):
                    request.token_ids = flat[start : start + num_ids]
                    start += num_ids
                return
        except OverflowError:  # beyond int64: certainly outside; the walk below words it
            pass
        for position, request in enumerate(requests):
            if request.token_ids is not None:
                where = f"inputs[{position}].prompt_token_ids"
                _check_int_range(where, list(request.token_ids), vocab_size, "token id", "the vocabulary ")

    def _check_type_ids(self, position: int, type_ids: Any, num_tokens: int) -> list[int]:
        where = f"inputs[{position}].token_type_ids"
        if not isinstance(type_ids, (list, tuple)) or len(type_ids) != num_tokens:
            raise ValueError(f"{where}: expected a list of {num_tokens} ints (one per token id)")
        _check_int_range(where, type_ids, self.type_vocab_size, "token type", "")
        return list(type_ids)


def _check_int_range(where: str, values: Sequence[Any], limit: int, noun: str, name: str) -> None:
    """Every value an int (not a bool) in [0, limit): ``map`` / ``set`` / ``min`` / ``max`` walk the list
    in C; the per-item walk in Python runs only to word the error."""
    if set(map(type, values)) == {int} and min(values) >= 0 and max(values) < limit:
        return
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int):
            expected = f"an int {noun}" if noun == "token id" else "an int"
            raise TypeError(f"{where}[{index}]: expected {expected}, got {describe(value)}")
        if not 0 <= value < limit:
            raise ValueError(f"{where}[{index}]: {noun} {value} is outside {name}[0, {limit})")


def _check_unicode(where: str, text: str) -> None:
    """A lone UTF-16 surrogate (JSON "\\ud800" decodes to one) is no Unicode text: the tokenizer would refuse
    it with an internal type error."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}: the text has a lone UTF-16 surrogate (U+{ord(text[e.start]):04X} at character "
            f"{e.start}), which is not valid Unicode; send valid UTF-8 text"
        ) from None


def describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"a {_type_name(value)} of {len(value)} items"
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    return _type_name(value)
