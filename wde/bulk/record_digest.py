"""What a part was embedded from: a digest of its records (id and text), kept in the part file, so that a
resume checks the records already written against the input as it is now, part by part, instead of
refusing any change to the file (a bad record fixed after the run failed must not lose the parts).

A part's digest is the sum, modulo 2**64, of its records' 64-bit BLAKE2b digests of ``[id, text]`` as
JSON: independent of row order, and computed in one streaming pass over the input at resume.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from wde.bulk.manifest import FingerprintMismatchError
from wde.bulk.parts import PartStore
from wde.bulk.readers import InputSpec, checked_records

DIGEST_MODULUS = 1 << 64


class ChangedRecordsError(FingerprintMismatchError):
    """A written part holds records that the input no longer holds as they were."""


def record_digest(record_id: Any, text: str) -> int:
    key = json.dumps([record_id, text], ensure_ascii=False).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def part_digest(ids: Sequence[Any], texts: Iterable[str]) -> str:
    """The digest of one part's records (ids as Python ints / strs: numpy scalars are converted)."""
    total = sum(record_digest(_plain(record_id), text) for record_id, text in zip(ids, texts, strict=True))
    return f"{total % DIGEST_MODULUS:016x}"


def check_parts_unchanged(spec: InputSpec, parts: PartStore) -> None:
    """Raise ``ChangedRecordsError`` naming the first part whose records differ in the input now (changed,
    gone, or a part written before parts carried a digest), with what to do."""
    # 1. each written id's part, and the digest each part was written with
    part_of: dict[Any, str] = {}
    stored: dict[str, str] = {}
    for name in parts.names:
        digest = parts.stored_digest(name)
        if digest is None:
            raise ChangedRecordsError(
                f"{parts.folder / name} was written without a record digest (an older wde) and the input "
                "changed since: pass a new --output directory, or the input it was made from"
            )
        stored[name] = digest
        for record_id in parts.ids(name):
            part_of[record_id] = name
    # 2. one pass over the input: the same digests from the records as they are now
    totals = dict.fromkeys(stored, 0)
    for record_id, text in checked_records(spec.whole()):  # parts a run without --limit wrote included
        part = part_of.get(record_id)
        if part is not None:
            totals[part] += record_digest(record_id, text)
    for name, digest in stored.items():
        if f"{totals[name] % DIGEST_MODULUS:016x}" != digest:
            raise ChangedRecordsError(
                f"{parts.folder / name} holds records whose text changed (or that are gone) in "
                f"{spec.path.name} since they were embedded: delete that part to embed them again, or pass "
                "a new --output directory"
            )


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, int)) else value
