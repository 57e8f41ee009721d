"""The part files of an output directory: ``part-000000.parquet``, ... each written whole or not at all,
with the columns ``id``, ``embedding`` (fixed-size list of float32) and ``num_tokens`` (int32), and the
digest of the records it was embedded from in its schema metadata (``wde.records_digest``,
``wde/bulk/record_digest.py``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from wde.bulk.atomic_file import write_atomically

PART_PATTERN = re.compile(r"^part-(\d{6,})\.parquet$")
DIGEST_KEY = b"wde.records_digest"


class PartStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names = sorted(path.name for path in folder.iterdir() if PART_PATTERN.match(path.name))
        self._next_index = max((_index(name) + 1 for name in self.names), default=0)
        self._id_type: pa.DataType | None = None

    def finished_ids(self) -> set[Any]:
        """The ids of every written part (read back from the files: they, not a log, are the truth)."""
        ids: set[Any] = set()
        for name in self.names:
            ids.update(self.ids(name))
        return ids

    def ids(self, name: str) -> list[Any]:
        """The ids of one part, in row order."""
        try:
            column = pq.read_table(self.folder / name, columns=["id"]).column("id")
        except (OSError, pa.ArrowException) as e:
            raise ValueError(
                f"{self.folder / name} cannot be read ({e}); delete it to re-embed its texts"
            ) from e
        self._id_type = self._id_type or column.type
        return column.to_pylist()

    def stored_digest(self, name: str) -> str | None:
        """The digest of the records the part was embedded from (None: written before parts carried one)."""
        metadata = pq.read_schema(self.folder / name).metadata or {}
        digest = metadata.get(DIGEST_KEY)
        return None if digest is None else digest.decode()

    def embedding_dim(self) -> int | None:
        if not self.names:
            return None
        return pq.read_schema(self.folder / self.names[0]).field("embedding").type.list_size

    def write(
        self,
        ids: Sequence[Any] | np.ndarray,
        embeddings: np.ndarray,
        num_tokens: np.ndarray,
        records_digest: str,
    ) -> str:
        """Write one part (``embeddings``: [num_texts, dim] float32; ``records_digest``: of its ids and
        texts); returns its file name."""
        table = part_table(ids, embeddings, num_tokens)
        table = table.replace_schema_metadata({DIGEST_KEY: records_digest.encode()})
        id_type = table.schema.field("id").type
        if self._id_type is not None and id_type != self._id_type:
            raise ValueError(
                f"ids of type {id_type} after ids of type {self._id_type} (first id here: {ids[0]!r}): an "
                "input's ids must all be strings or all be integers"
            )
        self._id_type = id_type
        name = f"part-{self._next_index:06d}.parquet"
        write_atomically(self.folder / name, lambda f: pq.write_table(table, f))
        self._next_index += 1
        self.names.append(name)
        return name


def part_table(ids: Sequence[Any] | np.ndarray, embeddings: np.ndarray, num_tokens: np.ndarray) -> pa.Table:
    dim = embeddings.shape[1]  # embeddings: [num_texts, dim]
    flat = pa.array(np.ascontiguousarray(embeddings, dtype=np.float32).reshape(-1))  # [num_texts * dim]
    try:
        id_array = pa.array(ids.tolist() if isinstance(ids, np.ndarray) else list(ids))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"ids must all be strings or all be integers ({e})") from e
    return pa.table(
        {
            "id": id_array,
            "embedding": pa.FixedSizeListArray.from_arrays(flat, dim),
            "num_tokens": pa.array(np.asarray(num_tokens, dtype=np.int32)),
        }
    )


def _index(name: str) -> int:
    match = PART_PATTERN.match(name)
    assert match is not None
    return int(match.group(1))
