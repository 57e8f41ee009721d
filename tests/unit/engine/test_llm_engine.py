"""LLMEngine over a fake runner and tokenizer: add / step / abort, every accepted request answered once,
a bad input leaves the queue untouched, a culprit fails alone, and the step's stats."""

from __future__ import annotations

import pytest

from tests.unit.engine.conftest import FakeRunner, make_engine, run_to_completion
from wde.outputs import EmbeddingOutput, ErrorOutput, ScoreOutput
from wde.request import PRIORITY_BATCH


@pytest.mark.parametrize("executor", ["sync", "async"])
def test_every_request_is_answered_once_with_its_own_result(executor: str) -> None:
    engine, runner, _ = make_engine(executor=executor, max_num_batched_tokens=16, max_num_seqs=3)
    try:
        texts = [" ".join(["w"] * n) for n in range(1, 11)]
        engine.add_requests([f"r{i}" for i in range(10)], texts)
        outputs = run_to_completion(engine)
    finally:
        engine.shutdown()
    assert set(outputs) == {f"r{i}" for i in range(10)}
    for i, text in enumerate(texts):
        output = outputs[f"r{i}"]
        assert isinstance(output, EmbeddingOutput)
        # FakeRunner: the sum of the token ids ([CLS] + 1001 per one-letter word + [SEP])
        assert float(output.embedding) == 101 + 102 + 1001 * len(text.split())
        assert output.num_tokens == len(text.split()) + 2
    assert all(len(batch) <= 3 for batch in runner.batches)
    assert engine.get_num_unfinished_requests() == 0 and not engine.has_unfinished_requests()


def test_a_bad_input_leaves_the_queue_untouched_and_ids_are_unique() -> None:
    engine, _, _ = make_engine()
    with pytest.raises(TypeError, match=r"inputs\[1\]"):
        engine.add_requests(["a", "b"], ["fine", 5])  # type: ignore[list-item]
    assert engine.num_waiting == 0 and not engine.has_unfinished_requests()
    engine.add_request("a", "fine")
    with pytest.raises(ValueError, match="already in the engine"):
        engine.add_request("a", "again")
    with pytest.raises(ValueError, match="must be distinct"):
        engine.add_requests(["x", "x"], ["1", "2"])


def test_a_culprit_fails_alone_and_the_engine_goes_on() -> None:
    engine, _, _ = make_engine(runner=FakeRunner(poisoned={"bad"}))
    engine.add_requests(["a", "bad", "b"], ["one", "two", "three"])
    outputs = run_to_completion(engine)
    assert isinstance(outputs["bad"], ErrorOutput) and not outputs["bad"].is_input_error
    assert isinstance(outputs["a"], EmbeddingOutput) and isinstance(outputs["b"], EmbeddingOutput)
    engine.add_request("c", "after")
    assert isinstance(run_to_completion(engine)["c"], EmbeddingOutput)


def test_abort_drops_a_queued_request_without_an_answer() -> None:
    engine, runner, _ = make_engine()
    engine.add_requests(["keep", "drop"], ["a", "b"])
    assert engine.abort_request("drop")
    assert not engine.abort_request("drop")
    assert set(run_to_completion(engine)) == {"keep"}
    assert runner.batches == [["keep"]]


def test_step_stats_count_what_ran() -> None:
    engine, _, _ = make_engine(max_num_seqs=2)
    engine.add_requests(["a", "b", "c"], ["one", "two words", "three more words"])
    engine.step()
    stats = engine.last_step_stats
    assert stats is not None
    assert stats.num_scheduled_seqs == 2 and stats.num_scheduled_tokens == 3 + 4
    assert stats.num_waiting == 1 and stats.num_tokenized >= 2
    assert [(b.num_seqs, b.num_tokens) for b in stats.finished_batches] == [(2, 7)]


def test_lower_priority_requests_wait_for_interactive_ones() -> None:
    engine, runner, _ = make_engine(max_num_seqs=1)
    engine.add_requests(["batch"], ["x"], priority=PRIORITY_BATCH)
    engine.add_requests(["interactive"], ["y"])
    run_to_completion(engine)
    assert runner.batches[0] == ["interactive"]


def test_the_score_workflow_answers_pairs() -> None:
    engine, _, _ = make_engine(task="score")
    engine.add_requests(["p"], [("query", "document")])
    output = run_to_completion(engine)["p"]
    assert isinstance(output, ScoreOutput)
    assert float(output.scores) == 101 + 1005 + 102 + 1008 + 102  # [CLS] query [SEP] document [SEP]
    assert output.num_tokens == 5


def test_idle_capture_runs_only_when_nothing_is_unfinished() -> None:
    engine, runner, _ = make_engine()
    engine.add_request("a", "x")
    assert engine.capture_while_idle(lambda: True) == 0 and runner.num_captures == 0
    run_to_completion(engine)
    engine.capture_while_idle(lambda: True)
    assert runner.num_captures == 1
