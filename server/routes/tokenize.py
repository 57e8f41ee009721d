"""TEI ``POST /tokenize``: per input, its tokens with ids, text and character offsets (no truncation)."""

from __future__ import annotations

from typing import Any

import tokenizers
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from server.app_state import get_state
from server.protocol import SimpleToken, TokenizeRequest
from server.responses import ORJSONResponse

router = APIRouter(tags=["TEI"])


@router.post("/tokenize", response_model=list[list[SimpleToken]], response_class=ORJSONResponse)
async def tokenize(body: TokenizeRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    state.check_num_inputs(len(body.inputs), "inputs")
    async with state.models.use(body.model) as model:
        info = model.engine.info
    prefix = _prompt_prefix(
        info.model_config.prompts, info.model_config.default_prompt_name, body.prompt_name
    )
    texts = [prefix + text for text in body.inputs]
    # A large request takes a while to tokenize: off the event loop.
    tokens = await run_in_threadpool(_tokenize, info.tokenizer, texts, body.add_special_tokens)
    return ORJSONResponse(tokens)


def _prompt_prefix(prompts: dict[str, str], default_name: str | None, prompt_name: str | None) -> str:
    name = default_name if prompt_name is None else prompt_name  # "" names no prompt: refused below
    if name is None:
        return ""
    if name not in prompts:
        known = ", ".join(sorted(prompts)) or "none"
        raise ValueError(f"prompt_name {name!r} is not a prompt of this model (known: {known})")
    return prompts[name]


def _tokenize(tokenizer: tokenizers.Tokenizer, texts: list[str], add_special_tokens: bool) -> list[Any]:
    encodings = tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
    return [_simple_tokens(text, encoding) for text, encoding in zip(texts, encodings, strict=True)]


def _simple_tokens(text: str, encoding: tokenizers.Encoding) -> list[dict[str, Any]]:
    tokens = []
    for token_id, token, (start, stop), special in zip(
        encoding.ids, encoding.tokens, encoding.offsets, encoding.special_tokens_mask, strict=True
    ):
        if special:
            tokens.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
        else:
            tokens.append(
                {"id": token_id, "text": text[start:stop], "special": False, "start": start, "stop": stop}
            )
    return tokens
