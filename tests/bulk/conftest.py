"""Inputs for the bulk tests: the first records of the shared docs.jsonl (skipped with its path when absent)
written as jsonl / csv / parquet / txt, and what ``LLM.encode`` gives for the same texts."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.shared_data import read_records

MIN_COSINE = 0.99999
NUM_DOCS = 128


def read_docs(limit: int) -> list[dict]:
    return read_records("docs.jsonl", limit)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def write_input(folder: Path, format: str, records: list[dict]) -> Path:
    """``records`` as a file of ``format``: csv and parquet with id and text, txt one text per line."""
    path = folder / f"input.{format}"
    if format == "jsonl":
        return write_jsonl(path, records)
    if format == "csv":
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["id", "text"])
            writer.writeheader()
            writer.writerows(records)
    elif format == "parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    else:
        path.write_text("".join(record["text"] + "\n" for record in records), encoding="utf-8")
    return path


def read_output(folder: Path) -> pa.Table:
    return pq.read_table(folder)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def embeddings_by_id(table: pa.Table) -> dict:
    """{id: (embedding [dim], num_tokens)} of an output; asserts every id is there once."""
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id was written twice"
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))  # [num_rows, dim]
    return {
        id_: (vectors[i], num_tokens)
        for i, (id_, num_tokens) in enumerate(zip(ids, table.column("num_tokens").to_pylist(), strict=True))
    }


def assert_equals_reference(table: pa.Table, ids: list, reference) -> None:
    """The output holds exactly ``ids``, each with the vector and token count ``LLM.encode`` gave."""
    by_id = embeddings_by_id(table)
    assert sorted(map(str, by_id)) == sorted(map(str, ids))
    got = np.stack([by_id[id_][0] for id_ in ids])  # [num_docs, dim]
    expected = np.stack([output.embedding for output in reference])
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert cosines(got, expected).min() >= MIN_COSINE
    assert [by_id[id_][1] for id_ in ids] == [output.num_tokens for output in reference]


@pytest.fixture(scope="session")
def docs() -> list[dict]:
    return read_docs(NUM_DOCS)


@pytest.fixture(scope="session")
def reference(default_llm, docs: list[dict]) -> list:
    """``LLM.encode`` of the docs' texts, in order."""
    return default_llm.encode([doc["text"] for doc in docs])
