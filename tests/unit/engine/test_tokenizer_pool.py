"""TokenizerPool: a chunk is split over the threads in order, runs off the calling thread, and its results
come back in the items' order with the span the slices took; the default thread count follows
TOKENIZERS_PARALLELISM."""

from __future__ import annotations

import threading

import pytest

from wde.engine.tokenizer_pool import MIN_SLICE, TokenizerPool, default_tokenizer_workers


def test_a_chunk_is_split_over_the_threads_and_comes_back_in_order() -> None:
    pool = TokenizerPool(num_workers=3)
    seen_threads: set[str] = set()
    lock = threading.Lock()

    def encode(items: list[int]) -> list[int]:
        with lock:
            seen_threads.add(threading.current_thread().name)
        return [item * 10 for item in items]

    items = list(range(3 * MIN_SLICE + 5))
    chunk = pool.submit(encode, items)
    results, (start, end) = chunk.results()
    assert results == [item * 10 for item in items]
    assert len(chunk.futures) == 3 and chunk.done()
    assert start <= end
    assert all(name.startswith("wde-tokenize") for name in seen_threads)
    pool.shutdown()


def test_a_small_chunk_is_one_slice() -> None:
    pool = TokenizerPool(num_workers=4)
    chunk = pool.submit(lambda items: items, list(range(MIN_SLICE - 1)))
    assert len(chunk.futures) == 1
    assert chunk.results()[0] == list(range(MIN_SLICE - 1))
    pool.shutdown()


def test_an_encode_error_reaches_the_waiter() -> None:
    pool = TokenizerPool(num_workers=1)

    def broken(items: list[int]) -> list[int]:
        raise RuntimeError("tokenizer crashed")

    with pytest.raises(RuntimeError, match="tokenizer crashed"):
        pool.submit(broken, [1, 2]).results()
    pool.shutdown()


def test_zero_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="tokenizer_workers"):
        TokenizerPool(0)


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
