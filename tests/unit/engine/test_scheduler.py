"""Scheduler without a model: budgets, FCFS order, lazy batched tokenization, abort, over-long inputs."""

from __future__ import annotations

import math
import random

import pytest

from tests.unit.engine.conftest import SchedulerFactory, text_request
from wde.engine.errors import InputTooLongError
from wde.engine.scheduler import (
    INTERACTIVE_HOLD_SECONDS,
    LOW_PRIORITY_STEP_DIVISOR,
    MAX_LOW_PRIORITY_HOLD_SECONDS,
)
from wde.engine.token_budget import TokenBudget
from wde.request import PRIORITY_BATCH, PRIORITY_INTERACTIVE, Request, RequestStatus


def drain(scheduler) -> list[list[str]]:
    """Step until nothing waits, as the engine loop does: wait out a hold-off, schedule, run (instantly),
    report the finished requests."""
    batches = []
    while scheduler.has_waiting():
        scheduler.clock.advance(scheduler.hold_seconds())
        output = scheduler.schedule()
        scheduler.finish(output.scheduled_requests)
        batches.append([r.request_id for r in output.scheduled_requests])
    return batches


def test_batches_respect_token_and_seq_budgets(make_scheduler: SchedulerFactory) -> None:
    rng = random.Random(0)
    for is_padded in (False, True):
        scheduler, _ = make_scheduler(max_num_batched_tokens=64, max_num_seqs=5, is_padded=is_padded)
        lengths = {}
        for i in range(200):
            request = text_request(f"r{i}", rng.randint(0, 25))
            lengths[request.request_id] = len(request.text.split()) + 2
            scheduler.add_request(request)
        batches = drain(scheduler)
        for batch in batches:
            sizes = [lengths[rid] for rid in batch]
            cost = max(sizes) * len(sizes) if is_padded else sum(sizes)
            assert 1 <= len(batch) <= 5
            assert cost <= 64, (is_padded, sizes)
        # every request ran, once
        ran = [rid for batch in batches for rid in batch]
        assert sorted(ran) == sorted(lengths) and len(ran) == len(set(ran)) == 200


def test_padded_backend_is_charged_max_len_times_num_seqs() -> None:
    varlen = TokenBudget(100, 10, is_padded=False)
    padded = TokenBudget(100, 10, is_padded=True)
    for budget in (varlen, padded):
        budget.add(40)
        budget.add(5)
    assert varlen.cost == 45
    assert padded.cost == 80
    assert varlen.can_add(50) and not padded.can_add(50)  # padded: 50 * 3 = 150 > 100


def test_fcfs_order_is_kept(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=40, max_num_seqs=3)
    ids = [f"r{i}" for i in range(30)]
    for i, rid in enumerate(ids):
        scheduler.add_request(text_request(rid, (i * 7) % 20))
    batches = drain(scheduler)
    assert [rid for batch in batches for rid in batch] == ids


def test_head_of_queue_is_never_skipped(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=19, max_num_seqs=8)
    scheduler.add_request(text_request("small", 2))  # 4 tokens
    scheduler.add_request(text_request("big", 16))  # 18 tokens: does not fit next to "small"
    scheduler.add_request(text_request("tiny", 0))  # 2 tokens: would fit, but must wait behind "big"
    assert drain(scheduler) == [["small"], ["big"], ["tiny"]]


def test_request_longer_than_budget_runs_alone(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=10, max_num_seqs=4, max_model_len=32)
    scheduler.add_request(text_request("a", 1))
    scheduler.add_request(text_request("huge", 25))  # 27 tokens > budget of 10
    scheduler.add_request(text_request("b", 1))
    assert drain(scheduler) == [["a"], ["huge"], ["b"]]


def test_tokenization_is_lazy_and_batched(make_scheduler: SchedulerFactory) -> None:
    scheduler, tokenizer = make_scheduler(max_num_batched_tokens=1000, max_num_seqs=4, max_num_lookahead=8)
    requests = [text_request(f"r{i}", 3) for i in range(20)]
    for request in requests:
        scheduler.add_request(request)
    assert tokenizer.num_encode_calls == 0  # queued, not tokenized
    assert not any(r.is_tokenized for r in requests)

    output = scheduler.schedule()
    assert [r.request_id for r in output.scheduled_requests] == ["r0", "r1", "r2", "r3"]
    assert tokenizer.num_encode_calls == 1  # one batched call for the whole lookahead window
    assert len(tokenizer.calls[0]) == 8
    assert [r.is_tokenized for r in requests] == [True] * 8 + [False] * 12

    scheduler.schedule()  # r4..r7 were tokenized already; the window now reaches r8..r11
    assert tokenizer.num_encode_calls == 2
    assert len(tokenizer.calls[1]) == 4
    drain(scheduler)
    assert sum(len(call) for call in tokenizer.calls) == 20  # every request tokenized exactly once


def test_abort_removes_a_queued_request(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=1000, max_num_seqs=10)
    requests = [text_request(f"r{i}", 2) for i in range(4)]
    for request in requests:
        scheduler.add_request(request)
    assert scheduler.abort_request(requests[1])
    assert requests[1].status == RequestStatus.ABORTED
    assert scheduler.num_waiting == 3
    assert not scheduler.abort_request(requests[1])  # already gone
    assert drain(scheduler) == [["r0", "r2", "r3"]]


def test_over_long_request_fails_alone_without_truncation(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=1000, max_num_seqs=10, max_model_len=16)
    scheduler.add_request(text_request("ok1", 3))
    scheduler.add_request(text_request("too-long", 40, truncate=False))
    scheduler.add_request(text_request("ok2", 3))
    output = scheduler.schedule()
    assert [r.request_id for r in output.scheduled_requests] == ["ok1", "ok2"]
    assert [r.request_id for r in output.failed_requests] == ["too-long"]
    failed = output.failed_requests[0]
    assert failed.status == RequestStatus.FAILED
    assert isinstance(failed.error, InputTooLongError)
    assert "42 tokens" in str(failed.error) and "max_model_len (16)" in str(failed.error)


def test_over_long_request_is_truncated_by_default(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=1000, max_num_seqs=10, max_model_len=16)
    request = text_request("long", 40)
    scheduler.add_request(request)
    output = scheduler.schedule()
    assert output.scheduled_requests == [request]
    assert request.num_tokens == 16 and request.token_ids[-1] == 102
    assert request.truncated


# ---- priorities: interactive before batch, FCFS within each ---------------------------------------------
def batch_request(request_id: str, num_words: int) -> Request:
    request = text_request(request_id, num_words)
    request.priority = PRIORITY_BATCH
    return request


def test_waiting_interactive_requests_go_before_waiting_batch_ones(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=12, max_num_seqs=3)
    for i in range(4):
        scheduler.add_request(batch_request(f"b{i}", 2))  # 4 tokens each, queued first
    scheduler.add_request(text_request("i0", 2))
    scheduler.add_request(text_request("i1", 2))
    scheduler.last_interactive_time = -math.inf  # no interactive traffic: batch work may fill the budget
    # one priority a step: the interactive step runs as fast as it would alone
    assert drain(scheduler) == [["i0", "i1"], ["b0", "b1", "b2"], ["b3"]]


def test_fcfs_within_each_priority(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=40, max_num_seqs=3)
    rng = random.Random(1)
    order: dict[int, list[str]] = {PRIORITY_INTERACTIVE: [], PRIORITY_BATCH: []}
    for i in range(40):
        request = text_request(f"r{i}", rng.randint(0, 15))
        request.priority = rng.choice([PRIORITY_INTERACTIVE, PRIORITY_BATCH])
        order[request.priority].append(request.request_id)
        scheduler.add_request(request)
    scheduled = [rid for batch in drain(scheduler) for rid in batch]
    # every interactive request was queued before the first batch request ran, so all of them go first
    assert scheduled == order[PRIORITY_INTERACTIVE] + order[PRIORITY_BATCH]


def test_an_interactive_head_that_does_not_fit_is_not_overtaken_by_batch(
    make_scheduler: SchedulerFactory,
) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=20, max_num_seqs=8)
    scheduler.add_request(text_request("i-small", 2))  # 4 tokens
    scheduler.add_request(text_request("i-big", 16))  # 18 tokens: not next to i-small
    scheduler.add_request(batch_request("b-tiny", 0))  # 2 tokens: would fit, must wait
    scheduler.last_interactive_time = -math.inf
    assert drain(scheduler) == [["i-small"], ["i-big"], ["b-tiny"]]


def test_batch_steps_are_short_while_interactive_requests_arrive(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=256, max_num_seqs=64)
    assert scheduler.max_num_low_priority_tokens == 256 // LOW_PRIORITY_STEP_DIVISOR  # 8 tokens
    for i in range(8):
        scheduler.add_request(batch_request(f"b{i}", 2))  # 4 tokens each
    scheduler.add_request(text_request("i0", 2))  # interactive traffic now: batch steps get 8 tokens
    assert scheduled_ids(scheduler) == ["i0"]
    scheduler.clock.advance(INTERACTIVE_HOLD_SECONDS)  # past the hold-off, within the interactive window
    assert scheduled_ids(scheduler) == ["b0", "b1"]
    scheduler.last_interactive_time = -math.inf  # quiet again: batch work fills the budget
    assert [r.request_id for r in scheduler.schedule().scheduled_requests] == [f"b{i}" for i in range(2, 8)]


def scheduled_ids(scheduler) -> list[str]:
    """One step, finished at once: the ids it ran."""
    output = scheduler.schedule()
    scheduler.finish(output.scheduled_requests)
    return [request.request_id for request in output.scheduled_requests]


def test_batch_work_is_held_off_while_and_just_after_an_interactive_step(
    make_scheduler: SchedulerFactory,
) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=64, max_num_seqs=8)
    for i in range(3):
        scheduler.add_request(batch_request(f"b{i}", 2))
    scheduler.add_request(text_request("i0", 2))
    assert scheduler.hold_seconds() == 0  # an interactive request waits: step now
    running = scheduler.schedule().scheduled_requests
    assert [r.request_id for r in running] == ["i0"]
    # 1. while i0 runs, batch work waits (the engine loop waits instead of stepping)
    assert scheduler.hold_seconds() == INTERACTIVE_HOLD_SECONDS
    assert scheduler.schedule().scheduled_requests == []
    # 2. i0 finished: its client's next request is likely a few ms away, batch work waits for it
    scheduler.finish(running)
    scheduler.clock.advance(INTERACTIVE_HOLD_SECONDS / 2)
    assert scheduler.hold_seconds() == pytest.approx(INTERACTIVE_HOLD_SECONDS / 2)
    assert scheduler.schedule().scheduled_requests == []
    scheduler.add_request(text_request("i1", 2))  # ... and it came: it runs with no batch step before it
    assert scheduler.hold_seconds() == 0
    assert scheduled_ids(scheduler) == ["i1"]
    # 3. no interactive request within the hold: batch work runs (in short steps: traffic is recent)
    scheduler.clock.advance(INTERACTIVE_HOLD_SECONDS)
    assert scheduler.hold_seconds() == 0
    assert scheduled_ids(scheduler) == ["b0"]  # the 2-token share of a recent-traffic step: one request


def test_held_off_batch_work_still_runs_a_step_every_max_hold(make_scheduler: SchedulerFactory) -> None:
    """A client that always sends its next request within the hold-off must not starve batch work."""
    scheduler, _ = make_scheduler(max_num_batched_tokens=64, max_num_seqs=8)
    for i in range(2):
        scheduler.add_request(batch_request(f"b{i}", 20))  # one per (short) batch step
    steps = []
    for i in range(300):  # an interactive request every 1 ms (each runs at once): 300 ms of traffic
        scheduler.add_request(text_request(f"i{i}", 0))
        if scheduler.hold_seconds() == 0:
            steps.append((scheduler.clock(), scheduled_ids(scheduler)))
        scheduler.clock.advance(0.001)
        if scheduler.hold_seconds() == 0:
            steps.append((scheduler.clock(), scheduled_ids(scheduler)))
    batch_steps = [time for time, ids in steps if ids and ids[0].startswith("b")]
    assert len(batch_steps) == 2  # both ran while interactive requests kept coming ...
    assert batch_steps[1] - batch_steps[0] >= MAX_LOW_PRIORITY_HOLD_SECONDS  # ... one per max hold
    assert sum(len(ids) for _, ids in steps if ids and ids[0].startswith("i")) == 300


def test_a_batch_request_longer_than_its_share_still_runs(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler(max_num_batched_tokens=64, max_num_seqs=16)
    scheduler.add_request(batch_request("b-long", 20))  # 22 tokens > the 2-token share
    scheduler.add_request(batch_request("b-next", 0))
    scheduler.add_request(text_request("i0", 0))
    assert drain(scheduler) == [["i0"], ["b-long"], ["b-next"]]


def test_abort_removes_a_queued_batch_request(make_scheduler: SchedulerFactory) -> None:
    scheduler, _ = make_scheduler()
    request = batch_request("b0", 2)
    scheduler.add_request(request)
    scheduler.add_request(text_request("i0", 2))
    assert scheduler.num_waiting == 2
    assert scheduler.abort_request(request)
    assert request.status == RequestStatus.ABORTED
    assert not scheduler.abort_request(request)
    assert drain(scheduler) == [["i0"]]
