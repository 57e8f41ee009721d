"""Unknown request fields: accepted and ignored, as TEI and vLLM do (clients send fields of other servers:
huggingface_hub's ``parameters``, langchain's ``options``, Infinity's ``modality``), or refused with 422
under ``--strict-request-fields``.

The request models (``server.protocols.common.RequestModel``) report the fields they do not know here; the
``RequestPipeline`` opens one ``IgnoredFields`` per HTTP request and lists what was ignored in the
``x-wde-ignored-fields`` response header.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field

from pydantic_core import PydanticCustomError

logger = logging.getLogger(__name__)

HEADER = "x-wde-ignored-fields"
STRICT_HINT = "--strict-request-fields is on"
MAX_HEADER_CHARS = 1000  # a body of many unknown fields still gets a header of sane size


@dataclass
class IgnoredFields:
    """The unknown fields of one HTTP request's body (``strict``: refuse them instead)."""

    strict: bool = False
    names: list[str] = field(default_factory=list)

    def header_value(self) -> str:
        """The distinct names in the order met, as printable ASCII (a JSON key can hold anything)."""
        value = ", ".join(dict.fromkeys(self.names))
        value = "".join(char if " " <= char <= "~" else "?" for char in value)
        return value if len(value) <= MAX_HEADER_CHARS else value[: MAX_HEADER_CHARS - 3] + "..."


# The current HTTP request's record; a request outside the middleware (the library, a test) has none.
current_ignored_fields: ContextVar[IgnoredFields | None] = ContextVar("wde_ignored_fields", default=None)


def report_unknown_fields(model_name: str, names: Iterable[str]) -> None:
    """Called by a request model that met fields it does not declare: refused (422 naming them) under
    --strict-request-fields, else logged at debug and listed in the response header."""
    names = list(names)
    record = current_ignored_fields.get()
    if record is not None and record.strict:
        raise PydanticCustomError(
            "unknown_fields",
            "{fields}: not fields of this request ({hint}); remove them",
            {"fields": ", ".join(names), "hint": STRICT_HINT},
        )
    logger.debug("%s: ignoring unknown fields %s", model_name, names)
    if record is not None:
        record.names.extend(names)
