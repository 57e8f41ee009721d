"""TokenizerPool: a chunk is split over the threads in order, runs off the calling thread, and its encodings
come back in the inputs' order with the span the slices took; a refused input comes back as its error; the
default thread count follows TOKENIZERS_PARALLELISM."""

from __future__ import annotations

import threading

import pytest

from tests.unit.engine.conftest import CountingTokenizer
from wde.engine.tokenizer_pool import MIN_SLICE, TokenizerInput, TokenizerPool, default_tokenizer_workers
from wde.tokenizer import TextInput, TokenizedInput, Truncation


class ThreadRecordingTokenizer(CountingTokenizer):
    def __init__(self, max_length: int) -> None:
        super().__init__(max_length)
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        with self.lock:
            self.threads.add(threading.current_thread().name)
        return super().encode_batch(inputs, truncation)


def _inputs(num_inputs: int) -> list[TokenizerInput]:
    return [(" ".join(["w"] * (index % 5 + 1)), None) for index in range(num_inputs)]


def test_a_chunk_is_split_over_the_threads_and_comes_back_in_order() -> None:
    tokenizer = ThreadRecordingTokenizer(16)
    pool = TokenizerPool(3, tokenizer)  # type: ignore[arg-type]
    inputs = _inputs(3 * MIN_SLICE + 5)
    chunk = pool.submit(inputs)
    encodings, (start, end) = chunk.results()
    assert [len(e.token_ids) for e in encodings] == [index % 5 + 3 for index in range(len(inputs))]  # type: ignore[union-attr]
    assert len(chunk.futures) == 3 and chunk.done() and len(tokenizer.calls) == 3
    assert start <= end
    assert all(name.startswith("wde-tokenize") for name in tokenizer.threads)
    pool.shutdown()


def test_a_small_chunk_is_one_slice() -> None:
    pool = TokenizerPool(4, CountingTokenizer(16))  # type: ignore[arg-type]
    chunk = pool.submit(_inputs(MIN_SLICE - 1))
    assert len(chunk.futures) == 1
    assert len(chunk.results()[0]) == MIN_SLICE - 1
    pool.shutdown()


class CrashingTokenizer(CountingTokenizer):
    def encode_batch(
        self, inputs: list[TextInput], truncation: Truncation | None = None
    ) -> list[TokenizedInput]:
        raise RuntimeError("cannot tokenize")


def test_a_refused_input_comes_back_as_its_error() -> None:
    pool = TokenizerPool(1, CrashingTokenizer(16))  # type: ignore[arg-type]
    encodings, _ = pool.submit(_inputs(2)).results()
    assert all(isinstance(e, RuntimeError) and "cannot tokenize" in str(e) for e in encodings)
    pool.shutdown()


def test_zero_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="tokenizer_workers"):
        TokenizerPool(0, CountingTokenizer(16))  # type: ignore[arg-type]


def test_default_workers_by_device_and_tokenizers_parallelism(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    assert default_tokenizer_workers("cpu") == 0  # the forward uses every core: tokenize between batches
    assert default_tokenizer_workers("cuda") == 1  # tokenizers spreads each call over the cores itself
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(6)))
    assert default_tokenizer_workers("cuda") == 5  # the cores, one left for the engine thread
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert default_tokenizer_workers("cuda") == 1


def test_a_negative_tokenizer_workers_setting_is_refused_naming_it() -> None:
    from wde.config import SchedulerConfig

    SchedulerConfig(2048, 8, tokenizer_workers=0).verify()  # 0: on the engine thread
    with pytest.raises(ValueError, match=r"tokenizer_workers \(-1\) must be >= 0"):
        SchedulerConfig(2048, 8, tokenizer_workers=-1).verify()
