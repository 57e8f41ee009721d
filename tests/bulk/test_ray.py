"""``wde embed --ray`` on a local Ray (2 CPUs): the same parts as in process, a resume across the two,
and ``WdeEmbedder`` in a pipeline of the user's own."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.bulk.conftest import (
    MIN_COSINE,
    assert_equals_reference,
    cosines,
    embeddings_by_id,
    read_output,
    write_input,
    write_jsonl,
)
from tests.tiny_models import training_texts
from wde.bulk import embed
from wde.bulk.ray import WdeEmbedder

pytestmark = pytest.mark.slow  # a local Ray cluster and its actors: tens of seconds

CHUNK_SIZE = 32


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, logging_level=logging.WARNING, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.shared_data
def test_ray_gives_the_in_process_output(tmp_path, docs, reference, local_ray) -> None:
    out = tmp_path / "out"
    result = embed(write_jsonl(tmp_path / "docs.jsonl", docs), out, chunk_size=CHUNK_SIZE, use_ray=True)
    assert (result.num_embedded, result.num_parts_written) == (len(docs), len(docs) // CHUNK_SIZE)
    assert result.ray_init_seconds is not None and result.ray_first_part_seconds > 0
    assert_equals_reference(read_output(out), [doc["id"] for doc in docs], reference)


@pytest.mark.shared_data
def test_ray_resumes_an_in_process_run(tmp_path, docs, reference, default_llm, local_ray) -> None:
    docs = [{"id": f"{i:04d}", "text": doc["text"]} for i, doc in enumerate(docs)]  # ids "0000": strings
    source, out = write_jsonl(tmp_path / "docs.jsonl", docs), tmp_path / "out"
    embed(source, out, chunk_size=CHUNK_SIZE, llm=default_llm)
    for name in ("part-000001.parquet", "part-000003.parquet"):  # as if those chunks never finished
        (out / name).unlink()
    result = embed(source, out, chunk_size=CHUNK_SIZE, use_ray=True)
    assert (result.num_skipped, result.num_embedded) == (2 * CHUNK_SIZE, len(docs) - 2 * CHUNK_SIZE)
    assert_equals_reference(read_output(out), [doc["id"] for doc in docs], reference)


@pytest.mark.shared_data
def test_ray_numbers_txt_lines_like_the_in_process_run(tmp_path, docs, reference, local_ray) -> None:
    source = write_input(tmp_path, "txt", docs[:40])
    embed(source, tmp_path / "out", chunk_size=16, use_ray=True)
    assert_equals_reference(read_output(tmp_path / "out"), list(range(40)), reference[:40])


@pytest.mark.shared_data
def test_wde_embedder_in_a_user_pipeline(docs, reference, local_ray) -> None:
    dataset = local_ray.data.from_items([{"body": doc["text"], "row": i} for i, doc in enumerate(docs[:48])])
    dataset = dataset.map_batches(
        WdeEmbedder,
        fn_constructor_kwargs={"text_column": "body", "embedding_column": "vector"},
        batch_size=16,
        compute=local_ray.data.ActorPoolStrategy(size=1),
        num_cpus=1,
    )
    rows = sorted(dataset.take_all(), key=lambda row: row["row"])
    got = np.stack([row["vector"] for row in rows])  # [48, 384]
    expected = np.stack([output.embedding for output in reference[:48]])
    assert cosines(got, expected).min() >= MIN_COSINE
    assert [row["num_tokens"] for row in rows] == [output.num_tokens for output in reference[:48]]


@pytest.mark.shared_data
def test_ray_reads_csv_and_parquet_as_the_in_process_run(tmp_path, docs, default_llm, local_ray) -> None:
    records = [{"id": f"{i:03d}", "text": doc["text"]} for i, doc in enumerate(docs[:24])]
    records[3]["text"] = "a quoted text\nover two lines, with a comma"
    for format in ("csv", "parquet"):
        source = write_input(tmp_path, format, records)
        embed(source, tmp_path / f"{format}-local", chunk_size=8, llm=default_llm)
        embed(source, tmp_path / f"{format}-ray", chunk_size=8, use_ray=True)
        local, on_ray = read_output(tmp_path / f"{format}-local"), read_output(tmp_path / f"{format}-ray")
        assert on_ray.schema == local.schema and on_ray.num_rows == len(records)
        expected = embeddings_by_id(local)
        for id_, (vector, num_tokens) in embeddings_by_id(on_ray).items():
            assert cosines(vector[None], expected[id_][0][None])[0] >= MIN_COSINE
            assert num_tokens == expected[id_][1]


@pytest.mark.shared_data
@pytest.mark.parametrize("input_format", ["jsonl", "csv", "parquet"])
def test_ray_reads_a_file_in_blocks_of_a_chunk(tmp_path, docs, input_format, local_ray) -> None:
    """The actor pool is handed whole blocks: one file read as one block would be embedded by one actor
    while the others wait (seen: 148 s on docs.jsonl with 2 actors, one of them idle)."""
    from wde.bulk.ray_runner import _read, data_context_settings
    from wde.bulk.readers import InputSpec

    spec = InputSpec.create(write_input(tmp_path, input_format, docs))
    with data_context_settings():
        blocks = _read(spec, CHUNK_SIZE, len(docs), done=set()).materialize()
    assert blocks.num_blocks() == len(docs) // CHUNK_SIZE
    assert sorted(blocks.to_pandas()["id"].tolist()) == sorted(str(doc["id"]) for doc in docs)


def test_ray_takes_only_the_first_records_with_a_limit(tmp_path, default_llm, local_ray) -> None:
    """``--limit`` on Ray: the driver reads the first records (Ray's readers would read them all)."""
    records = [{"id": f"r{i}", "text": text} for i, text in enumerate(training_texts()[:30])]
    source = write_jsonl(tmp_path / "texts.jsonl", records)
    result = embed(source, tmp_path / "out", chunk_size=4, limit=10, use_ray=True)
    assert (result.num_records, result.num_embedded) == (10, 10)
    reference = default_llm.encode([record["text"] for record in records[:10]])
    assert_equals_reference(
        read_output(tmp_path / "out"), [record["id"] for record in records[:10]], reference
    )
