"""The output directory without a model: one writer at a time, atomic parts, a foreign folder refused, and
``import wde`` loading neither pyarrow nor ray."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from wde.bulk.output_dir import OutputDir
from wde.bulk.record_digest import part_digest

SETTINGS = {"input": {"sha256": "x"}}


def test_one_writer_at_a_time(tmp_path) -> None:
    first = OutputDir.open(tmp_path / "out", "f1", SETTINGS)
    with pytest.raises(ValueError, match="being written by another wde embed"):
        OutputDir.open(tmp_path / "out", "f1", SETTINGS)
    first.close()
    OutputDir.open(tmp_path / "out", "f1", SETTINGS).close()  # the lock went with the first


def test_parts_are_whole_and_their_ids_are_done(tmp_path) -> None:
    out = OutputDir.open(tmp_path / "out", "f1", SETTINGS)
    embeddings = np.arange(12, dtype=np.float32).reshape(3, 4)  # [num_texts, dim]
    digest = part_digest(["a", "b", "c"], ["x", "y", "z"])
    assert out.parts.write(["a", "b", "c"], embeddings, np.array([5, 6, 7]), digest) == "part-000000.parquet"
    with pytest.raises(ValueError, match="ids of type int64 after ids of type string"):
        out.parts.write([1], embeddings[:1], np.array([5]), part_digest([1], ["x"]))
    out.close()
    reopened = OutputDir.open(tmp_path / "out", "f1", SETTINGS)
    assert reopened.parts.finished_ids() == {"a", "b", "c"}
    assert reopened.parts.stored_digest("part-000000.parquet") == digest
    table = pq.read_table(tmp_path / "out")
    assert table.column("embedding").to_pylist()[2] == [8.0, 9.0, 10.0, 11.0]
    reopened.close()


def test_a_folder_not_made_by_wde_embed_is_refused(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files but no _manifest\.json"):
        OutputDir.open(tmp_path, "f1", SETTINGS)


def test_import_wde_loads_neither_pyarrow_nor_ray() -> None:
    code = (
        "import sys, wde, wde.bulk, wde.bulk.ray; "
        "print(sorted(m for m in ('pyarrow', 'ray', 'pandas') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
