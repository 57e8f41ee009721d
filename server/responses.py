"""``ORJSONResponse``: JSON bodies through orjson, numpy arrays included (float32 kept as float32);
``streamed_json_array``: a large JSON array sent an item at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
from starlette.responses import JSONResponse, StreamingResponse


def _default(value: Any) -> Any:
    # orjson serializes C-contiguous arrays natively; anything else numpy goes through Python objects.
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(content: Any) -> bytes:
    return orjson.dumps(content, default=_default, option=orjson.OPT_SERIALIZE_NUMPY)


class ORJSONResponse(JSONResponse):
    """A JSONResponse (so FastAPI documents the route's response model in /openapi.json) rendered by
    orjson."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def streamed_json_array(items: list[Any], prefix: bytes = b"", suffix: bytes = b"") -> StreamingResponse:
    """``prefix + [item, ...] + suffix`` as JSON, sent one item at a time: each item is serialized as it is
    sent and dropped from ``items``, so a large body (token vectors: ~10 bytes of JSON per float) never
    exists whole in memory beside the arrays it comes from."""

    async def chunks() -> AsyncIterator[bytes]:
        yield prefix + b"["
        for index in range(len(items)):
            item, items[index] = items[index], None
            yield (b"," if index else b"") + dumps(item)
        yield b"]" + suffix

    return StreamingResponse(chunks(), media_type="application/json")
