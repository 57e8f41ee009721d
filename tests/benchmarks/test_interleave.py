"""benchmarks.interleave: one warm-up round, then one pass of every system per repeat, in turn; only the last
repeat's embeddings are kept."""

from __future__ import annotations

import numpy as np

from benchmarks.interleave import InProcessSystem, interleaved_order, time_interleaved


class FakeSystem:
    def __init__(self, label: str, calls: list[tuple[str, bool]]) -> None:
        self.label, self.dtype, self.calls = label, "float32", calls

    def time_pass(self, keep: bool) -> float:
        self.calls.append((self.label, keep))
        return float(len(self.calls))

    def last_embeddings(self) -> np.ndarray:
        return np.zeros((1, 1))

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts), 1))


def test_order_is_a_warm_up_round_then_round_robin() -> None:
    assert interleaved_order(3, 2) == [
        (-1, 0), (-1, 1), (-1, 2),
        (0, 0), (0, 1), (0, 2),
        (1, 0), (1, 1), (1, 2),
    ]  # fmt: skip


def test_time_interleaved_alternates_systems_and_keeps_the_last_pass() -> None:
    calls: list[tuple[str, bool]] = []
    systems = [FakeSystem("a", calls), FakeSystem("b", calls)]
    seconds = time_interleaved(systems, repeats=2)
    assert [label for label, _ in calls] == ["a", "b", "a", "b", "a", "b"]
    assert [keep for _, keep in calls] == [False, False, False, False, True, True]
    assert seconds == [[3.0, 5.0], [4.0, 6.0]]  # the warm-up passes (1, 2) are not kept


def test_in_process_system_keeps_the_embeddings_of_a_kept_pass() -> None:
    system = InProcessSystem("x", "float32", lambda texts: np.full((len(texts), 2), 1.5), ["a", "b", "c"])
    system.time_pass(keep=True)
    assert system.last_embeddings().shape == (3, 2)
    assert system.embed(["z"]).dtype == np.float32
