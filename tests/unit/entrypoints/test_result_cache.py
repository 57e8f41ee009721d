"""ResultCache: copies in and out (a caller cannot change a kept output), LRU eviction within the byte
bound, refusal of an entry larger than the cache, counters; size_of and copy_output on outputs."""

from __future__ import annotations

import numpy as np
import pytest

from wde.entrypoints.result_cache import ENTRY_OVERHEAD_BYTES, ResultCache, copy_output, size_of
from wde.outputs import CombinedEmbeddingOutput, EmbeddingOutput, RequestMetrics


def _output(request_id: str, dimensions: int = 16) -> EmbeddingOutput:
    return EmbeddingOutput(
        request_id, np.arange(dimensions, dtype=np.float32), 3, RequestMetrics(1.0, 2.0, 3.0)
    )


def test_get_and_put_copy_so_a_caller_cannot_change_a_kept_output() -> None:
    cache = ResultCache(1 << 20)
    original = _output("a")
    assert cache.put("k", original)
    original.embedding[0] = 99.0
    first = cache.get("k")
    assert first is not None and first.embedding[0] == 0.0 and first.metrics is None
    first.embedding[1] = 42.0
    again = cache.get("k")
    assert again is not None and again.embedding[1] == 1.0


def test_least_recently_used_entries_go_first_and_the_bound_holds() -> None:
    entry_size = size_of(copy_output(_output("kx"), drop_metrics=True)) + size_of("k0") + ENTRY_OVERHEAD_BYTES
    cache = ResultCache(3 * entry_size)
    for key in ("k0", "k1", "k2"):
        assert cache.put(key, _output(key))
    assert cache.get("k0") is not None  # k0 is now the most recently used
    assert cache.put("k3", _output("k3"))
    assert cache.get("k1") is None and cache.get("k0") is not None
    stats = cache.stats()
    assert stats.num_entries == 3 and stats.num_evictions == 1
    assert stats.num_bytes <= stats.max_bytes
    assert (stats.num_hits, stats.num_misses) == (2, 1)


def test_an_entry_larger_than_the_cache_is_not_kept() -> None:
    cache = ResultCache(100)
    assert not cache.put("big", _output("big", dimensions=1000))
    assert len(cache) == 0
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
        ResultCache(-1)


def test_size_of_counts_array_data_and_copy_output_shares_nothing_mutable() -> None:
    small, large = _output("s", 4), _output("l", 4000)
    assert size_of(large) - size_of(small) == pytest.approx(3996 * 4, abs=64)
    combined = CombinedEmbeddingOutput("c", {"dense": small}, 3)
    copied = copy_output(combined, drop_metrics=True)
    assert copied.outputs["dense"].embedding is not small.embedding
    assert copied.outputs["dense"].metrics is None and small.metrics is not None
    np.testing.assert_array_equal(copied.outputs["dense"].embedding, small.embedding)
