"""``parse_form``: a multipart/form-data body (what ``client.files.create`` sends) into its fields, with the
standard library's MIME parser (FastAPI's form support would need the python-multipart package)."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP


class FormError(ValueError):
    """The body is not a multipart/form-data form."""


@dataclass(frozen=True)
class FormField:
    name: str
    value: bytes
    filename: str | None = None  # set for a file part


def parse_form(content_type: str, body: bytes) -> dict[str, FormField]:
    """The fields of a multipart/form-data ``body`` by name (the first of a repeated name)."""
    # 1. the envelope: the content type with its boundary, then the body
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise FormError(
            f"Content-Type is {content_type or 'missing'!r}; send multipart/form-data with a boundary "
            "(fields 'file' and 'purpose')"
        )
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise FormError("the multipart body could not be read; send fields 'file' and 'purpose'")
    # 2. one field per part, named by its Content-Disposition
    fields: dict[str, FormField] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or name in fields:
            continue
        fields[name] = FormField(name, _payload(part), part.get_filename())
    return fields


def _payload(part: Message) -> bytes:
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""
