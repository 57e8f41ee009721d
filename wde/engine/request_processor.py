"""Lazy tokenization: the scheduler hands over a lookahead window; its texts go in batched calls, on the
tokenizer threads (or processes) ahead of need where the engine has a pool."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence

from wde.config import ModelConfig
from wde.engine.errors import InputTooLongError
from wde.engine.tokenizer_pool import (
    MIN_SLICE,
    Chunk,
    EncoderPool,
    Encoding,
    Span,
    TokenizerInput,
    encode_inputs,
)
from wde.request import Request
from wde.tokenizer import TextInput, Tokenizer

logger = logging.getLogger(__name__)
MIN_PREFETCH = 64  # texts handed to the threads ahead of need at least (one batched call's worth)


class RequestProcessor:
    """Makes queued requests ready to schedule: fills ``token_ids`` (and ``tokenize_span``, the batched
    call's start and end), cuts token-id inputs, fails (alone) a request that is too long to run.

    The window's first half is what the next steps take; the rest is tokenized ahead, on the pool's threads
    while the engine runs batches, as soon as it holds enough texts for a batched call to pay."""

    def __init__(
        self, model_config: ModelConfig, tokenizer: Tokenizer, pool: EncoderPool | None = None
    ) -> None:
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.pool = pool
        self._template_tail_ids: list[int] | None = None
        self._chunks: deque[tuple[list[Request], Chunk]] = deque()  # in submission order

    def process(self, requests: Sequence[Request]) -> int:
        """Make the front of ``requests`` (the scheduler's window, in scheduling order) ready; returns how
        many got their tokens in this call."""
        # 1. inputs given as token ids only need the length check, once
        not_ready = [index for index, request in enumerate(requests) if not request.ready]
        for index in not_ready:
            request = requests[index]
            if request.is_tokenized and not request.tokenizing:
                self._ready_given_ids(request)
        # 2. keep what the tokenizer threads finished
        num_done = self._collect(wait_for=None)
        # 3. the next steps need a request that is not ready: wait for its chunk, or tokenize it now
        first = next((index for index in not_ready if not requests[index].ready), None)
        if first is None:
            return num_done
        half = max(1, len(requests) // 2)
        if first < half and requests[first].tokenizing:
            num_done += self._collect(wait_for=requests[first])
        elif first < half:  # with threads, only the first half now (the rest goes ahead, below)
            needed = requests if self.pool is None else requests[:half]
            num_done += self._tokenize_now([r for r in needed if not r.ready and not r.tokenizing])
        # 4. what the window holds beyond that, ahead of need: to the threads (while this step's batch
        #    runs) once there are enough for a batched call; without threads, now, a half window at a time
        unsubmitted = [request for request in requests if not request.ready and not request.tokenizing]
        if self.pool is not None and len(unsubmitted) >= min(half, MIN_PREFETCH):
            self._submit(unsubmitted)
        elif self.pool is None and len(unsubmitted) >= half:
            num_done += self._tokenize_now(unsubmitted)
        return num_done

    def prepare_all(self, requests: Sequence[Request]) -> None:
        """Make every request ready now, on this thread, without the pool: what an API worker does to the
        requests it sends the engine process (their ids cut and their side applied, texts tokenized; a
        request that cannot run fails alone, as in ``process``)."""
        texts = []
        for request in requests:
            if request.is_tokenized:
                self._ready_given_ids(request)
            else:
                texts.append(request)
        if texts:
            self._tokenize_now(texts)

    def _ready_given_ids(self, request: Request) -> None:
        """An input given as token ids: cut, its side applied, ready (no tokenizer)."""
        self._truncate_token_ids(request)
        self._apply_side(request)
        request.ready = True

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def _tokenize_now(self, requests: list[Request]) -> int:
        """Tokenize ``requests`` before returning: inline when few, else split over the pool."""
        if self.pool is None or len(requests) <= MIN_SLICE:
            start = time.monotonic()
            inputs = self._inputs(requests)
            self._keep_all(requests, inputs, encode_inputs(self.tokenizer, inputs), (start, time.monotonic()))
            return len(requests)
        self._submit(requests)
        return self._collect(wait_for=requests[-1])

    def _submit(self, requests: list[Request]) -> None:
        assert self.pool is not None
        for request in requests:
            request.tokenizing = True
        self._chunks.append((requests, self.pool.submit(self._inputs(requests))))

    def _collect(self, wait_for: Request | None) -> int:
        """Keep the results of the chunks that are done, oldest first; with ``wait_for``, wait for the
        chunks up to the one holding it. Returns how many requests got their results."""
        num_done = 0
        while self._chunks and (self._chunks[0][1].done() or (wait_for is not None and wait_for.tokenizing)):
            requests, chunk = self._chunks.popleft()
            try:
                encodings, span = chunk.results()
            except Exception as e:  # a pool that broke (a tokenizer process died): encode them here
                logger.warning("the tokenizer pool failed (%r); tokenizing %d inputs here", e, len(requests))
                start = time.monotonic()
                encodings, span = encode_inputs(self.tokenizer, chunk.inputs), (start, time.monotonic())
            self._keep_all(requests, chunk.inputs, encodings, span)
            num_done += len(requests)
        return num_done

    def _inputs(self, requests: list[Request]) -> list[TokenizerInput]:
        """Each request's tokenizer input and truncation (on the engine thread: reads the requests)."""
        max_model_len = self.model_config.max_model_len
        return [(self._tokenizer_input(r), r.params.truncation(max_model_len)) for r in requests]

    def _keep_all(
        self,
        requests: list[Request],
        inputs: list[TokenizerInput],
        encodings: list[Encoding],
        span: Span,
    ) -> None:
        """Keep or fail each result (on the engine thread)."""
        for request, (text, _), encoding in zip(requests, inputs, encodings, strict=True):
            request.tokenizing = False
            request.ready = True
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
        tail_ids, token_ids = self._template_tail_ids, request.token_ids
        max_length = request.params.max_input_tokens or self.model_config.max_model_len
        kept = [] if token_ids is None else token_ids[: max_length - len(tail_ids)]
        request.token_ids = [*kept, *tail_ids]
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
