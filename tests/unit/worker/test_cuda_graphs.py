"""CUDA-graph bucket choice and capture policies, with a fake capturer (no GPU needed)."""

from __future__ import annotations

import logging

import pytest

from wde.worker.cuda_graphs import MAX_DEFAULT_BUCKET, CudaGraphManager, choose_bucket, graph_buckets

BUCKETS = [256, 512, 1024, 2048]


class FakeCapturer:
    """Records captures in order; fails for the buckets it is told to."""

    def __init__(self, fail_on: tuple[int, ...] = ()) -> None:
        self.captured: list[int] = []
        self.fail_on = set(fail_on)

    def capture(self, num_tokens: int) -> str:
        if num_tokens in self.fail_on:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.captured.append(num_tokens)
        return f"graph-{num_tokens}"

    def memory_bytes(self) -> int:
        return sum(self.captured) * 1024


def manager(mode: str, **capturer_args) -> tuple[CudaGraphManager, FakeCapturer]:
    capturer = FakeCapturer(**capturer_args)
    return CudaGraphManager(list(BUCKETS), mode, capturer), capturer


@pytest.mark.parametrize(
    ("num_tokens", "bucket"), [(1, 256), (256, 256), (257, 512), (1000, 1024), (2048, 2048), (2049, None)]
)
def test_choose_bucket_is_the_smallest_that_fits(num_tokens: int, bucket: int | None) -> None:
    assert choose_bucket(num_tokens, BUCKETS) == bucket


def test_graph_buckets_stop_at_the_budget_which_is_always_a_bucket() -> None:
    assert graph_buckets(None, 1000) == [256, 320, 384, 448, 512, 640, 768, 896, 1000]
    assert graph_buckets([100, 5000, 300], 1000) == [100, 300, 1000]
    assert graph_buckets(None, 100) == [100]
    with pytest.raises(ValueError, match="positive ints"):
        graph_buckets([0, 128], 1000)


def test_none_captures_nothing_and_runs_eagerly() -> None:
    graphs, capturer = manager("none")
    graphs.startup()
    assert graphs.graph_for(300) is None
    assert capturer.captured == []


def test_eager_captures_every_bucket_at_startup_largest_first() -> None:
    graphs, capturer = manager("eager")
    graphs.startup()
    assert capturer.captured == [2048, 1024, 512, 256]
    assert graphs.graph_for(300) == (512, "graph-512")
    assert capturer.captured == [2048, 1024, 512, 256]  # nothing captured twice
    assert [record.when for record in graphs.records] == ["startup"] * 4


def test_lazy_captures_the_largest_then_each_bucket_on_first_use() -> None:
    graphs, capturer = manager("lazy")
    graphs.startup()
    assert capturer.captured == [2048]
    assert graphs.graph_for(300) == (512, "graph-512")  # captured at the padded size
    assert graphs.graph_for(500) == (512, "graph-512")  # reused, not captured again
    assert graphs.graph_for(2000) == (2048, "graph-2048")
    assert graphs.graph_for(5000) is None  # past the largest bucket: eager
    assert capturer.captured == [2048, 512]
    assert graphs.pending_buckets() == []  # lazy never captures while idle


def test_idle_captures_remaining_buckets_largest_first_and_stops_when_work_arrives() -> None:
    graphs, capturer = manager("idle")
    graphs.startup()
    assert graphs.pending_buckets() == [1024, 512, 256]
    checks = iter([True, False])  # idle for one bucket, then a request arrives
    assert graphs.capture_while_idle(lambda: next(checks)) == 1
    assert capturer.captured == [2048, 1024]
    assert graphs.graph_for(200) == (256, "graph-256")  # first use still captures lazily
    assert graphs.capture_while_idle(lambda: True) == 1  # only 512 was left
    assert capturer.captured == [2048, 1024, 256, 512]
    assert graphs.capture_while_idle(lambda: True) == 0
    assert [record.when for record in graphs.records] == ["startup", "idle", "first use", "idle"]


def test_capture_failure_falls_back_to_eager_for_that_bucket(caplog: pytest.LogCaptureFixture) -> None:
    graphs, capturer = manager("lazy", fail_on=(512,))
    graphs.startup()
    with caplog.at_level(logging.WARNING):
        assert graphs.graph_for(300) is None
    assert "capture for 512 tokens failed" in caplog.text
    assert graphs.graph_for(300) is None  # not retried
    assert capturer.captured == [2048]
    assert graphs.graph_for(1000) == (1024, "graph-1024")


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="cuda_graph_mode 'always' is not one of"):
        CudaGraphManager(BUCKETS, "always", FakeCapturer())


def test_default_buckets_are_quarter_octaves_up_to_8192_tokens() -> None:
    """A batch up to 8,192 tokens is padded at most 25%; a larger one runs eagerly (no bucket holds it)."""
    buckets = graph_buckets(None, 65536)
    assert buckets[:5] == [256, 320, 384, 448, 512] and buckets[-1] == MAX_DEFAULT_BUCKET == 8192
    assert len(buckets) == 21
    assert all(choose_bucket(n, buckets) <= 1.25 * n for n in range(256, 8193, 7))
    assert choose_bucket(8193, buckets) is None
    assert graph_buckets(None, 3000)[-1] == 3000  # a budget under the cap is the largest bucket
