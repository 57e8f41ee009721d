"""Input validation for cross-encoders and classifiers: (text_1, text_2) pairs, single texts (a classifier
of one text, e.g. sentiment), or already-tokenized input."""

from __future__ import annotations

from typing import Any

from wde.engine.input_processor import InputProcessor, describe
from wde.inputs import PoolingParams
from wde.request import Request


class PairInputProcessor(InputProcessor):
    def _make_request(
        self, request_id: str, position: int, prompt: Any, params: PoolingParams, truncate: bool
    ) -> Request:
        if isinstance(prompt, str) or (isinstance(prompt, dict) and "prompt_token_ids" in prompt):
            return super()._make_request(request_id, position, prompt, params, truncate)
        if not isinstance(prompt, (tuple, list)) or len(prompt) != 2:
            raise TypeError(
                f"inputs[{position}]: a cross-encoder scores (text_1, text_2) pairs or single texts, "
                f"got {describe(prompt)}"
            )
        text_1 = self._check_text(position, prompt[0], field="text_1")
        text_2 = self._check_text(position, prompt[1], field="text_2")
        return Request(request_id=request_id, text_pair=(text_1, text_2), params=params, truncate=truncate)
