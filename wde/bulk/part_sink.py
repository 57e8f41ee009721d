"""``PartSink``: where embedded chunks go, in process or from Ray's actors: one parquet part each, recorded in
the output's journal (what a resumed run skips), and the progress bar."""

from __future__ import annotations

from typing import Any

import numpy as np

from wde.bulk.output_dir import OutputDir
from wde.bulk.progress import Progress
from wde.bulk.record_digest import part_digest


class PartSink:
    """Where embedded chunks go: one part file each, a log line, the progress bar."""

    def __init__(self, out: OutputDir, progress: Progress) -> None:
        self.out = out
        self.progress = progress
        self.num_parts = 0

    def begin(self, num_texts: int, first_id: Any) -> None:
        self.out.journal.record("begin", num_texts=num_texts, first_id=_json_id(first_id))

    def write(self, ids: Any, texts: Any, embeddings: np.ndarray, num_tokens: np.ndarray) -> None:
        name = self.out.parts.write(ids, embeddings, num_tokens, part_digest(ids, texts))
        num_chunk_tokens = int(np.sum(num_tokens))
        self.out.journal.record("part", part=name, num_texts=len(ids), num_tokens=num_chunk_tokens)
        self.num_parts += 1
        self.progress.update(len(ids), num_chunk_tokens)


def _json_id(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
