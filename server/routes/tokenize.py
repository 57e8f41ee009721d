"""TEI ``POST /tokenize``: per input, its tokens with ids, text and character offsets (no truncation).

The cost of one request is bounded like every other route's: each text at most ``MAX_INPUT_CHARS``
characters (``InputProcessor``'s limit), the inputs together at most ``--max-tokenize-tokens`` tokens.
Tokenizing and building the JSON run off the event loop, and the answer is streamed a slice of tokens at a
time, so neither a per-token dict of the whole answer nor the whole body ever exists in memory at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import tokenizers
from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from server.app_state import get_state
from server.process.memory_release import release_freed_memory, trim_soon, trim_soon_async
from server.protocols.tei import SimpleToken, TokenizeRequest
from server.responses import ORJSONResponse
from wde.engine.input_processor import MAX_INPUT_CHARS

router = APIRouter(tags=["TEI"])

# Tokens serialized per chunk of the streamed answer (~70 bytes of JSON each: ~300 KB per chunk).
TOKENS_PER_CHUNK = 4096
# A request that tokenized this many tokens hands the freed heap back to the system when done: a tokenizer
# encoding costs ~300 bytes a token in the tokenizer's native heap, which glibc otherwise keeps
# (``server/process/memory_release.py``: with one malloc arena, as ``wde serve`` sets, the trim returns all
# of it).
MIN_TOKENS_TO_TRIM = 16_384
# Inputs of at most this many characters together are tokenized and answered on the event loop, in one
# body: a few hundred microseconds at most, against the threadpool hops of the streamed way (one to
# tokenize, one per chunk of the answer), which cost a one-query request ~6x a cached /embed's CPU.
MAX_INLINE_CHARS = 2048
JSON = "application/json"
# One answer chunk is built at a time, whatever the number of /tokenize requests: building holds the GIL,
# and each more thread wanting it delays the event loop's turns (/health, other routes' I/O).
_BUILD_LOCK = threading.Lock()


@router.post("/tokenize", response_model=list[list[SimpleToken]], response_class=ORJSONResponse)
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    # 1. request-level limits: inputs, then characters per text (before any tokenizer work)
    state = get_state(request)
    state.check_num_inputs(len(body.inputs), "inputs")
    check_num_chars(body.inputs, MAX_INPUT_CHARS)
    # 2. the model's tokenizer and prompt
    async with state.models.use(body.model) as model:
        info = model.loaded_engine.info
    prefix = _prompt_prefix(
        info.model_config.prompts, info.model_config.default_prompt_name, body.prompt_name
    )
    texts = [prefix + text for text in body.inputs]
    max_tokens = state.settings.max_tokenize_tokens
    if sum(len(text) for text in texts) <= MAX_INLINE_CHARS:  # short: no thread hops, one body
        return Response(
            inline_body(info.tokenizer, texts, body.add_special_tokens, max_tokens), media_type=JSON
        )
    # 3. tokenize off the event loop, refusing past the tokens bound before any answer is built
    try:
        encodings = await run_in_threadpool(
            encode_within, info.tokenizer, texts, body.add_special_tokens, max_tokens
        )
    except ValueError:  # past the bound: a large encoding (and body) freed once the 422 is sent
        trim_soon()
        raise
    # 4. the answer, serialized a slice at a time in the threadpool (Starlette iterates a sync generator
    #    there) as the client reads it
    chunks = json_chunks(info.tokenizer, texts, encodings)
    num_tokens = sum(len(encoding) for encoding in encodings)
    # 5. a large answer's freed heap handed back once it is sent (its last chunks were in the socket's buffer)
    trim = BackgroundTask(trim_soon_async) if num_tokens >= MIN_TOKENS_TO_TRIM else None
    return StreamingResponse(chunks, media_type=JSON, background=trim)


def _prompt_prefix(prompts: dict[str, str], default_name: str | None, prompt_name: str | None) -> str:
    name = default_name if prompt_name is None else prompt_name  # "" names no prompt: refused below
    if name is None:
        return ""
    if name not in prompts:
        known = ", ".join(sorted(prompts)) or "none"
        raise ValueError(f"prompt_name {name!r} is not a prompt of this model (known: {known})")
    return prompts[name]


def check_num_chars(texts: Sequence[str], max_chars: int) -> None:
    """The per-text limit every route applies (the engine's ``InputProcessor``), as a 422 naming the input."""
    for position, text in enumerate(texts):
        if len(text) > max_chars:
            raise ValueError(
                f"inputs[{position}]: text has {len(text)} characters, more than the limit of {max_chars}; "
                "split the text"
            )


def encode_within(
    tokenizer: tokenizers.Tokenizer,
    texts: list[str],
    add_special_tokens: bool,
    max_tokens: int,
    trim_on_refusal: bool = True,
) -> list[tokenizers.Encoding]:
    """The encodings of ``texts``, one text at a time so that a request past ``max_tokens`` (the inputs
    together) stops at the first text that crosses it, holding at most that text's encoding.
    ``trim_on_refusal``: hand the freed heap back before raising (it walks the heap: off the event loop)."""
    encodings: list[tokenizers.Encoding] = []
    num_tokens = 0
    for position, text in enumerate(texts):
        # encode_batch, not encode: it releases the GIL, so the event loop runs meanwhile
        (encoding,) = tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)
        num_tokens += len(encoding)
        if num_tokens > max_tokens:
            del encoding, encodings  # not kept alive by the traceback's frame
            if trim_on_refusal:
                release_freed_memory()
            raise ValueError(
                f"inputs: {num_tokens} tokens by inputs[{position}], more than --max-tokenize-tokens "
                f"({max_tokens}) for one /tokenize request; split the request or raise the flag"
            )
        encodings.append(encoding)
    return encodings


def inline_body(
    tokenizer: tokenizers.Tokenizer, texts: list[str], add_special_tokens: bool, max_tokens: int
) -> bytes:
    """The whole answer for short inputs, the same bytes ``json_chunks`` streams. Runs on the event loop, so
    a refusal does not trim the heap: encodings of at most MAX_INLINE_CHARS characters are a few KiB."""
    encodings = encode_within(tokenizer, texts, add_special_tokens, max_tokens, trim_on_refusal=False)
    return orjson.dumps(
        [
            _simple_tokens(tokenizer, text, _columns(encoding), 0, len(encoding))
            for text, encoding in zip(texts, encodings, strict=True)
        ]
    )


def json_chunks(
    tokenizer: tokenizers.Tokenizer, texts: list[str], encodings: list[tokenizers.Encoding]
) -> Iterator[bytes]:
    """``[[token, ...], ...]`` as JSON, ``TOKENS_PER_CHUNK`` tokens per chunk; each encoding is dropped
    once sent. A token's text is its slice of the input (specials: the vocabulary's string)."""
    try:
        yield b"["
        for index, text in enumerate(texts):
            encoding, encodings[index] = encodings[index], None  # type: ignore[call-overload]
            yield b",[" if index else b"["
            yield from _text_chunks(tokenizer, text, encoding)
            del encoding
            yield b"]"
        yield b"]"
    finally:
        encodings.clear()


def _text_chunks(
    tokenizer: tokenizers.Tokenizer, text: str, encoding: tokenizers.Encoding
) -> Iterator[bytes]:
    """One text's tokens as JSON (without the brackets), a chunk at a time, each built under
    ``_BUILD_LOCK`` (building holds the GIL: one builder at a time leaves the event loop its turns)."""
    columns = _columns(encoding)  # read once: each property builds a new list of every token
    for start in range(0, len(encoding), TOKENS_PER_CHUNK):
        stop = min(start + TOKENS_PER_CHUNK, len(encoding))
        with _BUILD_LOCK:
            chunk = orjson.dumps(_simple_tokens(tokenizer, text, columns, start, stop))
        yield (b"," if start else b"") + chunk[1:-1]


Columns = tuple[list[int], list[tuple[int, int]], list[int]]  # ids, offsets, special-tokens mask


def _columns(encoding: tokenizers.Encoding) -> Columns:
    return encoding.ids, encoding.offsets, encoding.special_tokens_mask


def _simple_tokens(
    tokenizer: tokenizers.Tokenizer, text: str, columns: Columns, start: int, stop: int
) -> list[dict[str, Any]]:
    """The answer's dicts of tokens ``start`` to ``stop``."""
    ids, offsets, special = columns
    return [_simple_token(tokenizer, text, ids[i], offsets[i], special[i]) for i in range(start, stop)]


def _simple_token(
    tokenizer: tokenizers.Tokenizer, text: str, token_id: int, offset: tuple[int, int], special: int
) -> dict[str, Any]:
    if special:
        token = tokenizer.id_to_token(token_id)
        return {"id": token_id, "text": token, "special": True, "start": None, "stop": None}
    start, stop = offset
    return {"id": token_id, "text": text[start:stop], "special": False, "start": start, "stop": stop}
