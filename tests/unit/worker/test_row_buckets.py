"""Row buckets (wde/worker/row_buckets.py): the buckets themselves, the padded batch giving the same answers,
and the number of oneDNN primitives a stream of batches of many token counts builds: bounded by the buckets,
where without them it grows with every new count."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.tiny_models import save_tiny_bert, training_texts
from wde import LLM
from wde.worker.row_buckets import IDLE_WARM_MAX_ROWS, MIN_BUCKET_ROWS, bucket_rows, padding_lengths

MAX_TOKENS = 2048
TOLERANCE = 1e-5  # float32: the same rows through GEMMs of another row count


def test_buckets_hold_their_rows_with_little_padding() -> None:
    buckets = [bucket_rows(n) for n in range(1, MAX_TOKENS + 1)]
    assert all(b >= n for n, b in enumerate(buckets, start=1))
    assert buckets == sorted(buckets) and bucket_rows(1) == MIN_BUCKET_ROWS
    assert all(b <= n * 1.125 for n, b in enumerate(buckets, start=1) if n > MIN_BUCKET_ROWS)
    assert len(set(buckets)) == 57 and buckets[-1] == MAX_TOKENS
    assert all(bucket_rows(b) == b for b in set(buckets))


def test_padding_sequences_hold_the_padding_within_the_length_limit() -> None:
    assert padding_lengths(0, 256) == []
    assert padding_lengths(300, 256) == [256, 44]
    assert padding_lengths(512, 256) == [256, 256]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("row-buckets"))


def batches() -> list[list[str]]:
    """60 calls of 1-12 texts: almost every call a token count of its own."""
    texts, rng = training_texts(), np.random.default_rng(0)
    return [list(rng.choice(texts, size=int(rng.integers(1, 13)))) for _ in range(60)]


def packed_llm(bert_dir: Path, monkeypatch: pytest.MonkeyPatch, row_buckets: bool) -> LLM:
    monkeypatch.setenv("WDE_FLOAT_GEMM", "onednn_packed")  # the GEMM that builds a primitive per shape
    monkeypatch.setenv("WDE_ROW_BUCKETS", "1" if row_buckets else "0")
    llm = LLM(str(bert_dir), device="cpu", max_model_len=64)
    assert llm.engine.runner.pads_to_row_buckets == row_buckets
    return llm


def test_padded_batches_answer_as_unpadded_ones(bert_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = training_texts()[:40]
    padded = np.stack([o.embedding for o in packed_llm(bert_dir, monkeypatch, True).encode(texts)])
    plain = np.stack([o.embedding for o in packed_llm(bert_dir, monkeypatch, False).encode(texts)])
    np.testing.assert_allclose(padded, plain, rtol=0, atol=TOLERANCE)


def created_row_counts(llm: LLM, capfd: pytest.CaptureFixture[str]) -> list[int]:
    """The row count (``mb``) of every oneDNN inner product primitive built while the batches run."""
    capfd.readouterr()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
        for batch in batches():
            llm.encode(batch)
    lines = capfd.readouterr().out.splitlines()
    created = [line for line in lines if ",create:cache_miss," in line and ",inner_product," in line]
    return [int(re.search(r",mb(\d+)", line).group(1)) for line in created]  # type: ignore[union-attr]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch is built without oneDNN")
def test_a_stream_of_token_counts_builds_primitives_for_the_buckets_only(
    bert_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    num_shapes = 4  # BERT's block linears: fused qkv, attention output, intermediate, output
    bucketed = created_row_counts(packed_llm(bert_dir, monkeypatch, True), capfd)
    assert set(bucketed) <= {bucket_rows(n) for n in range(1, MAX_TOKENS + 1)}
    assert len(bucketed) <= num_shapes * len(set(bucketed))  # each (shape, bucket) built once
    # the same stream without buckets: a primitive set per new token count, the growth the buckets bound
    unbounded = created_row_counts(packed_llm(bert_dir, monkeypatch, False), capfd)
    assert len(set(unbounded)) > 2 * len(set(bucketed)), (sorted(set(unbounded)), sorted(set(bucketed)))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch is built without oneDNN")
def test_idle_warm_up_builds_the_small_buckets_ahead_of_traffic(
    bert_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """What a server's engine thread does while it waits: the buckets up to IDLE_WARM_MAX_ROWS, smallest
    first, stopping when work arrives; the traffic after builds nothing."""
    llm = packed_llm(bert_dir, monkeypatch, True)
    runner = llm.engine.runner
    assert runner.has_pending_captures()
    small = {bucket_rows(n) for n in range(1, IDLE_WARM_MAX_ROWS + 1)}
    num_cold = len(small - runner.warm_buckets)  # the load's warm-up batch ran one
    answers = iter([True, True, False])
    assert runner.capture_while_idle(lambda: next(answers)) == 2  # stopped when is_idle() said no
    assert runner.capture_while_idle(lambda: True) == num_cold - 2
    assert not runner.has_pending_captures() and small <= runner.warm_buckets
    assert all(rows > IDLE_WARM_MAX_ROWS for rows in created_row_counts(llm, capfd))  # the small ones: warm
