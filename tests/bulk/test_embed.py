"""``wde.bulk.embed`` in this process on real documents with the bundled model: the parts equal
``LLM.encode``, a rerun resumes from the parts on disk, and an output made with other settings is refused."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from server import cli
from tests.bulk.conftest import assert_equals_reference, read_output, write_input, write_jsonl
from tests.tiny_models import training_texts
from wde.bulk import embed
from wde.bulk.journal import Journal
from wde.bulk.manifest import MANIFEST_NAME, FingerprintMismatchError
from wde.bulk.record_digest import ChangedRecordsError

CHUNK_SIZE = 32


@pytest.mark.shared_data
def test_output_equals_llm_encode(tmp_path, docs, reference, default_llm) -> None:
    out = tmp_path / "out"
    result = embed(write_jsonl(tmp_path / "docs.jsonl", docs), out, chunk_size=CHUNK_SIZE, llm=default_llm)
    ids = [doc["id"] for doc in docs]
    assert (result.num_records, result.num_embedded, result.num_skipped) == (len(docs), len(docs), 0)
    assert result.num_parts_written == 4 and result.num_tokens == sum(o.num_tokens for o in reference)
    table = read_output(out)  # pyarrow / pandas read the folder whole: _manifest.json, _log.jsonl skipped
    assert table.schema.names == ["id", "embedding", "num_tokens"]
    assert table.column("id").to_pylist() == ids  # parts in input order
    assert_equals_reference(table, ids, reference)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert (manifest["complete"], manifest["num_rows"], manifest["embedding_dim"]) == (True, len(docs), 384)
    assert sorted(p.name for p in out.glob("part-*")) == [f"part-{i:06d}.parquet" for i in range(4)]


@pytest.mark.shared_data
def test_a_rerun_embeds_only_the_missing_parts(tmp_path, docs, reference, default_llm) -> None:
    source, out = write_jsonl(tmp_path / "docs.jsonl", docs), tmp_path / "out"
    embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm)
    # a crash after two parts: the others are gone, a half-written temporary file is left behind
    for name in ("part-000002.parquet", "part-000003.parquet"):
        (out / name).unlink()
    (out / ".tmp-part-000002.parquet").write_bytes(b"PAR1 half a file")
    assert read_output(out).num_rows == 2 * CHUNK_SIZE  # what is on disk stays readable

    result = embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm)
    assert (result.num_skipped, result.num_embedded) == (2 * CHUNK_SIZE, len(docs) - 2 * CHUNK_SIZE)
    assert not list(out.glob(".tmp-*"))
    assert_equals_reference(read_output(out), [doc["id"] for doc in docs], reference)
    runs = [event for event in Journal.read(out) if event["event"] == "run"]
    assert [run["num_done"] for run in runs] == [0, 2 * CHUNK_SIZE]

    again = embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm)  # complete: nothing to do
    assert (again.num_embedded, again.num_skipped, again.num_parts_written) == (0, len(docs), 0)


@pytest.mark.shared_data
@pytest.mark.parametrize("format", ["jsonl", "csv", "parquet", "txt"])
def test_each_input_format(tmp_path, format, docs, reference, default_llm) -> None:
    records = docs[:40]
    source = write_input(tmp_path, format, records)
    embed(source, tmp_path / "out", chunk_size=16, llm=default_llm)
    table = read_output(tmp_path / "out")
    # txt: one text per line, the id is the line number from 0; the others keep their id field
    ids = list(range(len(records))) if format == "txt" else [doc["id"] for doc in records]
    assert table.column("id").to_pylist() == ids
    assert_equals_reference(table, ids, reference[: len(records)])


@pytest.mark.shared_data
def test_records_without_the_id_field_are_numbered(tmp_path, docs, reference, default_llm) -> None:
    records = [{"body": doc["text"]} for doc in docs[:20]]
    source = write_jsonl(tmp_path / "bodies.jsonl", records)
    embed(source, tmp_path / "out", text_field="body", chunk_size=8, llm=default_llm)
    assert_equals_reference(read_output(tmp_path / "out"), list(range(20)), reference[:20])


@pytest.mark.shared_data
def test_an_output_of_other_settings_is_refused(tmp_path, docs, default_llm) -> None:
    source, out = write_jsonl(tmp_path / "docs.jsonl", docs[:20]), tmp_path / "out"
    embed(source, out, chunk_size=8, llm=default_llm)
    parts = sorted(out.glob("part-*"))
    with pytest.raises(FingerprintMismatchError, match=r"differs in: encode\.dimensions"):
        embed(source, out, chunk_size=8, dimensions=128, llm=default_llm)
    other = write_jsonl(tmp_path / "other.jsonl", docs[20:40])
    # another file of the same format and fields: its records are not the ones written
    with pytest.raises(ChangedRecordsError, match=r"part-000000\.parquet holds records whose text changed"):
        embed(other, out, chunk_size=8, llm=default_llm)
    assert sorted(out.glob("part-*")) == parts  # nothing written, nothing removed


@pytest.mark.shared_data
def test_the_command_refuses_with_one_line_and_exit_2(tmp_path, docs, capsys) -> None:
    source, out = write_jsonl(tmp_path / "docs.jsonl", docs[:10]), tmp_path / "out"
    assert cli.main(["embed", str(source), "--output", str(out), "--chunk-size", "4", "--no-progress"]) == 0
    assert "10 records; embedded 10 texts" in capsys.readouterr().out
    assert cli.main(["embed", str(source), "-o", str(out), "--dimensions", "64", "--no-progress"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("wde embed: error: ") and "encode.dimensions" in error
    assert cli.main(["embed", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_bad_records_are_named(tmp_path, default_llm) -> None:
    duplicate = write_jsonl(tmp_path / "dup.jsonl", [{"id": 1, "text": "a"}, {"id": 1, "text": "b"}])
    with pytest.raises(ValueError, match="id 1 appears twice"):
        embed(duplicate, tmp_path / "out1", llm=default_llm)
    no_text = write_jsonl(tmp_path / "no_text.jsonl", [{"id": 1, "body": "a"}])
    with pytest.raises(ValueError, match=r"has no 'text' field.*--text-field"):
        embed(no_text, tmp_path / "out2", llm=default_llm)
    not_text = write_jsonl(tmp_path / "not_text.jsonl", [{"id": 1, "text": "a"}, {"id": 2, "text": 7}])
    with pytest.raises(ValueError, match=r"record 1 \(id 2\) has no string 'text'"):
        embed(not_text, tmp_path / "out3", llm=default_llm)
    with pytest.raises(ValueError, match="pass --input-format"):
        embed(write_jsonl(tmp_path / "docs.data", [{"text": "a"}]), tmp_path / "out4", llm=default_llm)


@pytest.mark.shared_data
def test_parquet_parts_hold_float32_vectors(tmp_path, docs, default_llm) -> None:
    embed(write_jsonl(tmp_path / "d.jsonl", docs[:5]), tmp_path / "out", llm=default_llm)
    schema = pq.read_schema(tmp_path / "out" / "part-000000.parquet")
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[384]"
    assert str(schema.field("num_tokens").type) == "int32"
    frame = pd.read_parquet(tmp_path / "out")
    assert frame.shape == (5, 3) and np.asarray(frame.embedding[0]).shape == (384,)


def test_limit_takes_the_first_records_and_a_later_run_resumes(tmp_path, default_llm) -> None:
    """``--limit N``: the first N records; then the whole file resumes after them, and a smaller limit on a
    finished output embeds nothing and keeps every row."""
    records = [{"id": f"t{i}", "text": text} for i, text in enumerate(training_texts()[:40])]
    source, out = write_jsonl(tmp_path / "texts.jsonl", records), tmp_path / "out"
    argv = ["embed", str(source), "-o", str(out), "--no-progress", "--chunk-size", "8"]
    assert cli.main([*argv, "--limit", "12"]) == 0
    assert read_output(out).column("id").to_pylist() == [record["id"] for record in records[:12]]
    result = embed(source, out, chunk_size=8, llm=default_llm)
    assert (result.num_records, result.num_skipped, result.num_embedded) == (40, 12, 28)
    reference = default_llm.encode([record["text"] for record in records])
    assert_equals_reference(read_output(out), [record["id"] for record in records], reference)
    again = embed(source, out, chunk_size=8, limit=5, llm=default_llm)
    assert (again.num_records, again.num_embedded) == (5, 0)
    assert json.loads((out / MANIFEST_NAME).read_text())["num_rows"] == 40
    with pytest.raises(ValueError, match="limit must be a positive number of records, got 0"):
        embed(source, out, limit=0, llm=default_llm)
