"""A bad record found late costs nothing, and a fixed input resumes: every record is checked in the counting
pass (no part is written, no output folder made), a resume checks the records already written part by part
(a digest of each part's ids and texts) rather than the input file's hash, and a failed run says why in
``_log.jsonl``. Lines of txt and jsonl inputs end at "\\n" or "\\r\\n" only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.bulk.conftest import MIN_COSINE, cosines, embeddings_by_id, read_output, write_jsonl
from wde.bulk import embed
from wde.bulk.journal import Journal
from wde.bulk.readers import InputSpec, count_records, read_chunks
from wde.bulk.record_digest import ChangedRecordsError

CHUNK_SIZE = 100


def records(num: int) -> list[dict]:
    return [{"id": i, "text": f"record number {i} of a bulk input"} for i in range(num)]


def test_a_bad_record_late_fails_before_any_part_and_the_fixed_file_runs(tmp_path, default_llm) -> None:
    rows = records(600)
    rows[500]["text"] = None
    source, out = write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out"
    with pytest.raises(ValueError, match=r"record 500 \(id 500\) has no string 'text' field"):
        embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm, show_progress=False)
    assert not out.exists()  # nothing embedded, nothing written: no folder to refuse the fixed file
    rows[500]["text"] = "record number 500, fixed"
    write_jsonl(source, rows)
    result = embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm, show_progress=False)
    assert (result.num_records, result.num_embedded) == (600, 600)


def test_a_text_over_the_character_limit_is_refused_up_front(tmp_path, default_llm) -> None:
    rows = records(3)
    rows[2]["text"] = "x" * 1_000_001
    with pytest.raises(ValueError, match=r"record 2 \(id 2\) has 1000001 characters, more than the limit"):
        embed(
            write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out", llm=default_llm, show_progress=False
        )
    assert not (tmp_path / "out").exists()


def test_a_fixed_input_resumes_when_the_written_records_are_unchanged(tmp_path, default_llm) -> None:
    rows = records(300)
    source, out = write_jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out"
    embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm, show_progress=False)
    (out / "part-000002.parquet").unlink()  # a run cut short after two parts
    # the input changes where nothing was written yet, and grows
    rows[250]["text"] = "a record changed after the first run"
    rows.append({"id": 300, "text": "a record added after the first run"})
    write_jsonl(source, rows)
    result = embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm, show_progress=False)
    assert (result.num_skipped, result.num_embedded) == (200, 101)
    by_id = embeddings_by_id(read_output(out))
    assert sorted(by_id) == list(range(301))
    expected = default_llm.encode([rows[250]["text"], rows[300]["text"]])
    got = np.stack([by_id[250][0], by_id[300][0]])  # [2, dim]
    assert cosines(got, np.stack([output.embedding for output in expected])).min() >= MIN_COSINE
    assert json.loads((out / "_manifest.json").read_text())["complete"]

    # a record already embedded changes: refused, naming its part, and the log says so
    parts = sorted(out.glob("part-*"))
    rows[5]["text"] = "a record of the first part, changed"
    write_jsonl(source, rows)
    with pytest.raises(ChangedRecordsError, match=r"part-000000\.parquet holds records whose text changed"):
        embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm, show_progress=False)
    failed = [event for event in Journal.read(out) if event["event"] == "failed"]
    assert len(failed) == 1 and "ChangedRecordsError" in failed[0]["error"]
    assert sorted(out.glob("part-*")) == parts  # nothing written, nothing removed


def _read_all(path: Path, format: str | None = None) -> list[tuple[object, str]]:
    spec = InputSpec.create(path, format=format)
    assert count_records(spec) == sum(len(chunk.ids) for chunk in read_chunks(spec, 2, frozenset()))
    return [
        pair
        for chunk in read_chunks(spec, 2, frozenset())
        for pair in zip(chunk.ids, chunk.texts, strict=True)
    ]


def test_txt_lines_end_at_lf_or_crlf_only(tmp_path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes("a lone \r stays\nwindows\r\nline\u2028separator\nlast".encode())
    assert _read_all(path) == [
        (0, "a lone \r stays"),
        (1, "windows"),
        (2, "line\u2028separator"),
        (3, "last"),
    ]


def test_jsonl_lines_end_at_lf_or_crlf_only(tmp_path) -> None:
    path = tmp_path / "in.jsonl"
    lines = ['{"id": 1,\r"text": "cr as JSON whitespace"}', '{"id": 2, "text": "u2028 \u2028 kept"}']
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    assert _read_all(path) == [(1, "cr as JSON whitespace"), (2, "u2028 \u2028 kept")]
