"""A failing input fails only itself: its batch is retried without it, and the engine keeps serving."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest

from tests.poisoned_forward import INNOCENT_TEXTS, MARKER, PoisonedForward
from wde import LLM, PoolingParams
from wde.engine.errors import RequestFailedError
from wde.engine.llm_engine import LLMEngine
from wde.outputs import EmbeddingOutput, ErrorOutput, RequestOutput

TOLERANCE = 1e-5
TEXTS = INNOCENT_TEXTS


@pytest.fixture(scope="module", params=["sync", "async"])
def llm(request: pytest.FixtureRequest) -> Iterator[LLM]:
    # a small token budget: ~12 of these inputs per batch, so the marked one shares a batch with others
    llm = LLM(executor=request.param, max_num_batched_tokens=128)
    yield llm
    llm.engine.shutdown()


@pytest.fixture
def poisoned(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> PoisonedForward:
    forward = PoisonedForward(llm.engine)
    monkeypatch.setattr(llm.engine.runner, "execute_model", forward)
    return forward


def run(engine: LLMEngine, prompts: list[str]) -> dict[str, RequestOutput]:
    ids = [f"req-{index}" for index in range(len(prompts))]
    engine.add_requests(ids, prompts, PoolingParams())
    outputs: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            outputs[output.request_id] = output
    assert sorted(outputs) == sorted(ids)
    return outputs


def reference(llm: LLM, texts: list[str]) -> np.ndarray:
    return np.stack([output.embedding for output in llm.encode(texts)])


def test_marker_is_absent_from_the_innocent_texts(llm: LLM) -> None:
    marker_ids = llm.engine.tokenizer.backend.encode(MARKER, add_special_tokens=False).ids
    for text in TEXTS:
        assert marker_ids[0] not in llm.engine.tokenizer.backend.encode(text).ids


def test_only_the_culprit_fails_and_the_rest_of_its_batch_succeeds(
    llm: LLM, poisoned: PoisonedForward, caplog: pytest.LogCaptureFixture
) -> None:
    expected = reference(llm, TEXTS)  # no marker: the patched forward passes these through
    prompts = [*TEXTS[:17], f"the {MARKER} input", *TEXTS[17:]]
    caplog.set_level(logging.DEBUG, logger="wde.engine.culprit_search")
    outputs = run(llm.engine, prompts)
    # 1. every innocent request has its own, correct embedding
    got = [outputs[f"req-{index}"] for index in range(len(prompts)) if index != 17]
    assert all(isinstance(output, EmbeddingOutput) for output in got)
    assert np.abs(np.stack([output.embedding for output in got]) - expected).max() <= TOLERANCE
    # 2. the culprit fails with an error naming the failure, not as bad input
    culprit = outputs["req-17"]
    assert isinstance(culprit, ErrorOutput) and not culprit.is_input_error
    assert isinstance(culprit.error, RequestFailedError)
    message = str(culprit.error)
    assert message.startswith("the forward pass failed for this input: RuntimeError('poisoned token")
    # 3. logs: the batch's traceback once, one warning naming the culprit, its traceback at debug
    batch_errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(batch_errors) == 1 and batch_errors[0].exc_info is not None
    assert "retrying it without the failing input" in batch_errors[0].getMessage()  # it shared a batch
    assert len(warnings) == 1 and "req-17" in warnings[0].getMessage()
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in caplog.records)
    # 4. the engine serves the next request
    assert np.abs(reference(llm, TEXTS[:1]) - expected[:1]).max() <= TOLERANCE


def test_two_culprits_of_one_batch_fail_alone(llm: LLM, poisoned: PoisonedForward) -> None:
    expected = reference(llm, TEXTS[:10])
    prompts = [*TEXTS[:3], f"{MARKER} one", *TEXTS[3:6], f"{MARKER} two", *TEXTS[6:10]]
    outputs = run(llm.engine, prompts)
    failed = sorted(rid for rid, output in outputs.items() if isinstance(output, ErrorOutput))
    assert failed == ["req-3", "req-7"]
    innocent = [outputs[f"req-{index}"] for index in range(len(prompts)) if index not in (3, 7)]
    assert np.abs(np.stack([output.embedding for output in innocent]) - expected).max() <= TOLERANCE


def test_a_lone_failing_request_is_not_run_again(llm: LLM, poisoned: PoisonedForward) -> None:
    outputs = run(llm.engine, [f"just {MARKER}"])
    assert isinstance(outputs["req-0"], ErrorOutput) and poisoned.num_calls == 1


def test_llm_encode_raises_naming_the_culprits_position(llm: LLM, poisoned: PoisonedForward) -> None:
    with pytest.raises(RequestFailedError, match=r"^inputs\[2\]: the forward pass failed for this input"):
        llm.encode([*TEXTS[:2], f"a {MARKER}", *TEXTS[2:5]])
    assert len(llm.encode(TEXTS[:3])) == 3
