"""Lazy tokenization: the scheduler hands over a lookahead window; all its texts go in ONE batched call."""

from __future__ import annotations

import time
from collections.abc import Sequence

from wde.config import ModelConfig
from wde.engine.errors import InputTooLongError
from wde.request import Request
from wde.tokenizer import TextInput, TokenizedInput, Tokenizer, Truncation


class RequestProcessor:
    """Fills ``token_ids`` of queued requests (and ``tokenize_span``, the batched call's start and end);
    fails (alone) a request that is too long to run."""

    def __init__(self, model_config: ModelConfig, tokenizer: Tokenizer) -> None:
        self.model_config = model_config
        self.tokenizer = tokenizer
        self._template_tail_ids: list[int] | None = None

    def process(self, requests: Sequence[Request]) -> int:
        """Tokenize every untokenized request of ``requests`` in at most one tokenizer call; returns how many
        were tokenized."""
        # 1. inputs that were given as token ids only need the length check
        to_tokenize: list[Request] = []
        for request in requests:
            if request.is_tokenized:
                self._truncate_token_ids(request)
                self._apply_side(request)
            else:
                to_tokenize.append(request)
        if not to_tokenize:
            return 0
        # 2. one batched tokenizer call over the window (one per other truncation asked: left, shorter)
        start = time.monotonic()
        texts = [self._tokenizer_input(request) for request in to_tokenize]
        encodings = self._encode_window(to_tokenize, texts)
        span = (start, time.monotonic())
        # 3. keep or fail each result
        for request, text, encoding in zip(to_tokenize, texts, encodings, strict=True):
            if isinstance(encoding, Exception):
                request.fail(ValueError(f"the tokenizer refused this input: {encoding}"))
                continue
            if encoding.truncated and not request.truncate and request.params.max_input_tokens is None:
                num_tokens = self.tokenizer.count_tokens(text)
                request.fail(self._too_long(num_tokens))
                continue
            request.token_ids = encoding.token_ids
            request.token_type_ids = encoding.token_type_ids
            request.truncated = encoding.truncated
            request.tokenize_span = span
            self._apply_side(request)
            if encoding.truncated and request.text_pair is not None and self.model_config.pair_template:
                self._restore_template_tail(request)
        return len(to_tokenize)

    def _encode_window(
        self, requests: list[Request], texts: list[TextInput]
    ) -> list[TokenizedInput | Exception]:
        """Each text's encoding, or the error for one the tokenizer refused; one call per truncation."""
        groups: dict[Truncation | None, list[int]] = {}
        for index, request in enumerate(requests):
            truncation = request.params.truncation(self.model_config.max_model_len)
            groups.setdefault(truncation, []).append(index)
        by_position: dict[int, TokenizedInput | Exception] = {}
        for truncation, indices in groups.items():
            group = [texts[index] for index in indices]
            try:
                encodings: list[TokenizedInput | Exception] = list(
                    self.tokenizer.encode_batch(group, truncation)
                )
            except Exception:  # one input the tokenizer refuses must not fail the window: find it alone
                encodings = [self._encode_one(text, truncation) for text in group]
            by_position.update(zip(indices, encodings, strict=True))
        return [by_position[index] for index in range(len(texts))]

    def _encode_one(self, text: TextInput, truncation: Truncation | None) -> TokenizedInput | Exception:
        try:
            return self.tokenizer.encode_batch([text], truncation)[0]
        except Exception as e:
            return e

    def _tokenizer_input(self, request: Request) -> TextInput:
        if request.text_pair is not None:
            template = self.model_config.pair_template
            if template is None:
                return request.text_pair
            query, document = request.text_pair
            instruction = request.params.instruction or self.model_config.pair_instruction
            return template.format(instruction=instruction, query=query, document=document)
        if request.text is None:
            raise RuntimeError(f"request {request.request_id} has neither text nor token ids")
        prompt_name = self._prompt_name(request)
        if prompt_name is None:
            return request.text
        return self.model_config.prompts[prompt_name] + request.text

    def _prompt_name(self, request: Request) -> str | None:
        """The request's prompt, else the prompt named after its side ("query" / "document", as
        ``encode_query`` / ``encode_document`` pick them), else the model's default prompt."""
        params = request.params
        if params.prompt_name is not None:
            return params.prompt_name
        if params.input_type is not None and params.input_type in self.model_config.prompts:
            return params.input_type
        return self.model_config.default_prompt_name

    def _apply_side(self, request: Request) -> None:
        """A late-interaction model's query or document side, as sentence-transformers' Transformer
        tokenizes it: the side's length cap (the closing special token kept, as the tokenizer's own
        truncation does), then a query's expansion tokens up to the expansion length."""
        config, token_ids = self.model_config.multi_vector, request.token_ids
        if config is None or request.params.input_type is None or token_ids is None:
            return
        is_query = request.params.input_type == "query"
        expansion = config.query_expansion_length if is_query else None
        # 1. the cap: query_length / document_length; a fixed expansion fixes the query's length, a
        #    minimum one raises query_length to at least the expansion length
        limit = config.query_length if is_query else config.document_length
        if expansion is not None and config.query_expansion_strategy == "fixed":
            limit = expansion
        elif expansion is not None and limit is not None:
            limit = max(limit, expansion)
        if limit is not None and len(token_ids) > limit:
            token_ids = [*token_ids[: limit - 1], token_ids[-1]]
            request.token_ids = token_ids
            if request.token_type_ids is not None:
                request.token_type_ids = request.token_type_ids[:limit]
            request.truncated = True
        # 2. ColBERT's query augmentation: expansion tokens up to the expansion length
        expansion_token_id = config.query_expansion_token_id
        if expansion is None or expansion_token_id is None or len(token_ids) >= expansion:
            return
        num_expansion = expansion - len(token_ids)
        request.token_ids = [*token_ids, *[expansion_token_id] * num_expansion]
        if request.token_type_ids is not None:
            request.token_type_ids = [*request.token_type_ids, *[0] * num_expansion]
        if not config.query_expansion_attend:
            request.num_unattended_tokens = num_expansion

    def _restore_template_tail(self, request: Request) -> None:
        """Truncation cut the template's text after {document} (an LLM reranker's assistant prompt): cut the
        document instead, as the model card does, and end with that text's tokens again."""
        if self._template_tail_ids is None:
            tail = self.model_config.pair_template.rsplit("{document}", 1)[-1]  # type: ignore[union-attr]
            self._template_tail_ids = self.tokenizer.untruncated().encode(tail, add_special_tokens=False).ids
        tail_ids, token_ids = self._template_tail_ids, request.token_ids or []
        max_length = request.params.max_input_tokens or self.model_config.max_model_len
        request.token_ids = [*token_ids[: max_length - len(tail_ids)], *tail_ids]
        request.token_type_ids = [0] * len(request.token_ids)

    def _truncate_token_ids(self, request: Request) -> None:
        """Token-id inputs are cut as given, to max_model_len (or the request's max_input_tokens) from the
        request's side (the InputProcessor already refused over-long ones whose request asked not to
        truncate)."""
        params, token_ids = request.params, request.token_ids
        max_length = params.max_input_tokens or self.model_config.max_model_len
        if token_ids is None or len(token_ids) <= max_length:
            return
        request.truncated = True
        kept = slice(-max_length, None) if params.truncation_direction == "left" else slice(max_length)
        request.token_ids = token_ids[kept]
        if request.token_type_ids is not None:
            request.token_type_ids = request.token_type_ids[kept]

    def _too_long(self, num_tokens: int) -> InputTooLongError:
        return InputTooLongError(
            f"input has {num_tokens} tokens, more than max_model_len ({self.model_config.max_model_len}); "
            "shorten it or pass truncate=True"
        )
