"""``ORJSONResponse``: JSON bodies through orjson, numpy arrays included (float32 kept as float32)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from starlette.responses import JSONResponse


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
