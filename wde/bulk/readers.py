"""Reading a bulk input: jsonl, csv, parquet or txt records as (id, text) chunks, in input order.

A record's id is its ``id_field`` when the input has that field, else its position in the input counted from
0 (for txt, where every line is one text, the line number counted from 0). jsonl ids keep their JSON type
(int or str), parquet ids their column type, csv ids are strings. pyarrow is imported only here and only
when a csv or parquet input is read.

Lines (jsonl, txt) end at "\n" or "\r\n" only: a lone "\r" or U+2028 inside a text stays in it, so that
txt ids are the line numbers an editor or ``wc -l`` shows. Every record is checked (``checked_records``:
a string text within the engine's character limit, valid Unicode, an id seen once) in the counting pass,
before anything is embedded or written.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wde.engine.input_processor import MAX_INPUT_CHARS

FORMATS = ("jsonl", "csv", "parquet", "txt")
SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "txt",
}
MAX_CSV_FIELD_BYTES = 1 << 30  # the csv module's default cap (128 KiB) is below a long document


@dataclass(frozen=True)
class InputSpec:
    """Where the texts are and which fields hold them: ``id_field`` absent from the records (or txt input)
    means positional ids."""

    path: Path
    format: str
    text_field: str = "text"
    id_field: str | None = "id"
    limit: int | None = None  # only the first ``limit`` records (None: all)

    @classmethod
    def create(
        cls,
        path: str | Path,
        text_field: str = "text",
        id_field: str | None = "id",
        format: str | None = None,
        limit: int | None = None,
    ) -> InputSpec:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive number of records, got {limit!r}")
        path = Path(path).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"input {path} is not a file")
        if format is None:
            format = SUFFIXES.get(path.suffix.lower())
            if format is None:
                raise ValueError(
                    f"cannot tell the format of {path.name} from its suffix; pass --input-format "
                    f"({', '.join(FORMATS)})"
                )
        if format not in FORMATS:
            raise ValueError(f"input format {format!r} is not one of {', '.join(FORMATS)}")
        spec = cls(path, format, text_field, id_field if format != "txt" else None, limit)
        return spec._with_present_id_field()

    @property
    def positional_ids(self) -> bool:
        return self.id_field is None

    def _with_present_id_field(self) -> InputSpec:
        """Keep ``id_field`` only when the first record has it (else ids are positions); a first record
        without the text field is refused here, before any model loads."""
        if self.format == "txt":
            return self
        first = next(_records(self), None)
        if first is None:
            return self
        if self.text_field not in first:
            raise ValueError(
                f"{self.path.name}: the first record has no {self.text_field!r} field (it has "
                f"{', '.join(map(repr, first)) or 'none'}); pass --text-field"
            )
        if self.id_field is not None and self.id_field not in first:
            return dataclasses.replace(self, id_field=None)
        return self

    def whole(self) -> InputSpec:
        """The same input without ``limit``."""
        return dataclasses.replace(self, limit=None)


@dataclass
class Chunk:
    """Up to ``chunk_size`` pending records, in input order."""

    ids: list[Any]
    texts: list[str]


def count_records(spec: InputSpec) -> int:
    """How many records the input holds, every one checked as ``checked_records`` does: a bad record stops
    a run here, before any model work or part file."""
    return sum(1 for _ in checked_records(spec))


def read_chunks(spec: InputSpec, chunk_size: int, skip_ids: set[Any] | frozenset[Any]) -> Iterator[Chunk]:
    """The records whose id is not in ``skip_ids``, ``chunk_size`` at a time, checked as
    ``checked_records`` does."""
    ids: list[Any] = []
    texts: list[str] = []
    for record_id, text in checked_records(spec):
        if record_id in skip_ids:
            continue
        ids.append(record_id)
        texts.append(text)
        if len(ids) == chunk_size:
            yield Chunk(ids, texts)
            ids, texts = [], []
    if ids:
        yield Chunk(ids, texts)


def checked_records(spec: InputSpec) -> Iterator[tuple[Any, str]]:
    """Every record's (id, text) in input order. Raises ValueError naming the record for a missing or
    non-string text, a text over the engine's character limit or with a lone UTF-16 surrogate, and an id
    seen twice (resuming needs unique ids)."""
    seen: set[Any] = set()
    for position, record in enumerate(_records(spec)):
        record_id = position if spec.positional_ids else record.get(spec.id_field)
        text = record if spec.format == "txt" else record.get(spec.text_field)
        where = f"{spec.path.name}: record {position} (id {record_id!r})"
        if not isinstance(text, str):
            raise ValueError(f"{where} has no string {spec.text_field!r} field (got {type(text).__name__})")
        if len(text) > MAX_INPUT_CHARS:
            raise ValueError(
                f"{where} has {len(text)} characters, more than the limit of {MAX_INPUT_CHARS}; split it"
            )
        if not text.isascii():
            _check_unicode(where, text)
        if not spec.positional_ids:
            if record_id in seen:
                raise ValueError(
                    f"{spec.path.name}: id {record_id!r} appears twice (again at record {position}); ids "
                    "must be unique to resume: pass --id-field naming a unique field, or one the records "
                    "lack to number them by position"
                )
            seen.add(record_id)
        yield record_id, text


def _check_unicode(where: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}: the text has a lone UTF-16 surrogate (U+{ord(text[e.start]):04X} at character "
            f"{e.start}), which is not valid Unicode; write valid UTF-8 text"
        ) from None


def _records(spec: InputSpec) -> Iterator[Any]:
    """dicts (jsonl, csv, parquet) or str lines (txt), in input order; the first ``spec.limit`` only."""
    readers = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet, "txt": _txt}
    records = readers[spec.format](spec)
    return records if spec.limit is None else itertools.islice(records, spec.limit)


def _jsonl(spec: InputSpec) -> Iterator[dict[str, Any]]:
    for line_number, line in enumerate(_lines(spec.path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{spec.path.name}:{line_number}: not a JSON object ({e})") from e
        if not isinstance(record, dict):
            raise ValueError(f"{spec.path.name}:{line_number}: expected a JSON object, got {line[:40]!r}")
        yield record


def _csv(spec: InputSpec) -> Iterator[dict[str, Any]]:
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)
    with spec.path.open(encoding="utf-8", newline="") as f:
        yield from csv.DictReader(f)


def _parquet(spec: InputSpec) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(spec.path)
    names = parquet.schema_arrow.names
    if spec.text_field not in names:
        raise ValueError(
            f"{spec.path.name} has no {spec.text_field!r} column (it has {', '.join(map(repr, names))}); "
            "pass --text-field"
        )
    columns = [name for name in (spec.text_field, spec.id_field) if name is not None and name in names]
    for batch in parquet.iter_batches(batch_size=4096, columns=columns):
        yield from batch.to_pylist()


def _txt(spec: InputSpec) -> Iterator[str]:
    return _lines(spec.path)


def _lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 file, ended by "\n" or "\r\n" only (not universal newlines, which also end
    one at a lone "\r"; not ``str.splitlines``, which ends one at U+2028 and other Unicode breaks)."""
    with path.open("rb") as f:  # binary: lines end at b"\n" alone
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path.name}:{line_number}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start}); "
                    "write the file as UTF-8"
                ) from None
            yield line.removesuffix("\n").removesuffix("\r")
