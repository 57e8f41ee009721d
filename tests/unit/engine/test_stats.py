"""StepStats / BatchStats: what one step reports, each step its own list of finished batches."""

from __future__ import annotations

from wde.engine.stats import BatchStats, StepStats


def test_each_step_has_its_own_batch_list() -> None:
    first, second = StepStats(0, 0, 0, 0, 0.0), StepStats(0, 0, 0, 0, 0.0)
    first.finished_batches.append(BatchStats(num_seqs=2, num_tokens=9, execute_seconds=0.01))
    assert second.finished_batches == []
    assert first.finished_batches[0].num_tokens == 9
