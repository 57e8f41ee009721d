"""The task plans driven by a fake submitter: encode in order with precision, cosine scoring by an
embedding model (each distinct text once), rerank order and top_n, classify, operation and output checks,
and the two drivers (inline and async) giving the same answer."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from tests.unit.engine.conftest import FakeSubmitter, make_model_config
from wde.config import ModelConfig
from wde.engine.errors import OutputNotSupportedError, TaskNotSupportedError
from wde.entrypoints import tasks
from wde.entrypoints.output_precision import Calibration, quantization_ranges, quantize
from wde.entrypoints.tasks import TASKS, Submit, run_plan, run_plan_async
from wde.inputs import PoolingParams
from wde.outputs import ScoreOutput


def _embedder() -> ModelConfig:
    return make_model_config(max_model_len=32)


def _cross_encoder() -> ModelConfig:
    config = dataclasses.replace(make_model_config(max_model_len=32), task="score")
    config.hf_config = {**config.hf_config, "num_labels": 1}  # one relevance score per pair
    return config


def test_encode_answers_in_input_order_and_submits_once() -> None:
    submit = FakeSubmitter()
    outputs = run_plan(tasks.encode(_embedder(), ["b", "a", "b"], PoolingParams()), submit)
    assert [o.request_id for o in outputs] == ["0", "1", "2"]
    np.testing.assert_array_equal(outputs[0].embedding, submit.vector("b"))
    np.testing.assert_array_equal(outputs[1].embedding, submit.vector("a"))
    assert len(submit.submissions) == 1


def test_encode_binary_precision_packs_the_signs() -> None:
    submit = FakeSubmitter(dimensions=16)
    (output,) = run_plan(tasks.encode(_embedder(), "text", PoolingParams(precision="ubinary")), submit)
    expected = np.packbits(submit.vector("text") > 0)
    np.testing.assert_array_equal(output.embedding, expected)
    assert submit.submissions[0][1].precision is None  # the engine runs floats


def test_encode_int8_ranges_come_from_the_calibration_set_once() -> None:
    submit = FakeSubmitter(dimensions=16)
    calibration = Calibration(["alpha", "beta", "gamma", "delta"], "texts.txt")
    for texts in (["x"], ["x", "y", "z"]):
        run_plan(tasks.encode(_embedder(), texts, PoolingParams(precision="int8"), None, calibration), submit)
    (first, _), (calibration_texts, options), *rest = submit.submissions
    assert first == ["x"] and calibration_texts == calibration.texts and options.truncate is True
    assert [texts for texts, _ in rest] == [["x", "y", "z"]]  # the ranges are kept: embedded once
    alone, in_batch = (
        run_plan(tasks.encode(_embedder(), texts, PoolingParams(precision="int8"), None, calibration), submit)
        for texts in (["x"], ["y", "x"])
    )
    ranges = quantization_ranges(np.stack([submit.vector(text) for text in calibration.texts]))
    expected = quantize(submit.vector("x")[None, :], "int8", ranges)[0]
    np.testing.assert_array_equal(alone[0].embedding, expected)
    np.testing.assert_array_equal(in_batch[1].embedding, expected)  # the batch does not change the codes


def test_encode_int8_without_a_calibration_set_uses_the_bundled_one() -> None:
    submit = FakeSubmitter()
    (output,) = run_plan(tasks.encode(_embedder(), ["x"], PoolingParams(precision="uint8")), submit)
    assert submit.submissions[1][0] == Calibration.bundled().texts
    assert output.embedding.dtype == np.uint8


def test_an_embedding_model_scores_by_cosine_embedding_each_text_once() -> None:
    submit = FakeSubmitter()
    scores = run_plan(tasks.score(_embedder(), "q", ["d1", "d2", "q"], PoolingParams()), submit)
    ((submitted, params),) = submit.submissions
    assert submitted == ["q", "d1", "d2"] and params.normalize is True
    for output, document in zip(scores, ["d1", "d2", "q"], strict=True):
        expected = float(np.dot(submit.vector("q"), submit.vector(document)))
        assert output.score == pytest.approx(expected, abs=1e-6)
    assert scores[2].score == pytest.approx(1.0, abs=1e-6)


def test_a_cross_encoder_scores_pairs_and_reranks_highest_first() -> None:
    submit = FakeSubmitter()
    documents = ["bb", "a", "dddd", "ccc"]  # the fake scores a pair by len(document)
    ranked, num_tokens = run_plan(
        tasks.rerank(_cross_encoder(), None, "q", documents, PoolingParams(), top_n=2, return_documents=True),
        submit,
    )
    assert [(r.index, r.document) for r in ranked] == [(2, "dddd"), (3, "ccc")]
    assert num_tokens == 3 * len(documents)
    assert submit.submissions[0][0] == [("q", d) for d in documents]


def test_classify_submits_as_given() -> None:
    submit = FakeSubmitter()
    outputs = run_plan(tasks.classify(_cross_encoder(), [("a", "bcd")], PoolingParams()), submit)
    assert isinstance(outputs[0], ScoreOutput) and outputs[0].score == 3.0


def test_each_task_refuses_the_operations_it_does_not_serve() -> None:
    with pytest.raises(TaskNotSupportedError, match="serves task 'score', not 'encode'"):
        next(tasks.encode(_cross_encoder(), ["x"], PoolingParams()))
    with pytest.raises(TaskNotSupportedError, match="serves task 'embed', not 'classify'"):
        next(tasks.classify(_embedder(), ["x"], PoolingParams()))
    with pytest.raises(OutputNotSupportedError, match="does not produce sparse output"):
        next(tasks.encode(_embedder(), ["x"], PoolingParams(output="sparse")))
    with pytest.raises(ValueError, match="is not one of"):
        next(tasks.encode(_embedder(), ["x"], PoolingParams(output="colour")))


def test_a_failed_input_is_raised_named_by_position() -> None:
    with pytest.raises(ValueError, match=r"inputs\[1\]: refused by the fake engine"):
        run_plan(tasks.encode(_embedder(), ["ok", "bad"], PoolingParams()), FakeSubmitter(fail_on="bad"))


def test_inputs_must_be_texts() -> None:
    with pytest.raises(ValueError, match="inputs is empty"):
        tasks.as_prompt_list([])
    with pytest.raises(TypeError, match="got int"):
        tasks.as_prompt_list(5)
    assert tasks.as_prompt_list("one") == ["one"]


def test_the_async_driver_equals_the_inline_one() -> None:
    submit = FakeSubmitter()

    async def async_submit(prompts, params):  # type: ignore[no-untyped-def]
        return submit(prompts, params)

    plan_args = (_embedder(), "q", ["d1", "d2"], PoolingParams())
    inline = run_plan(tasks.score(*plan_args), submit)
    awaited = asyncio.run(run_plan_async(tasks.score(*plan_args), async_submit))
    assert [o.score for o in inline] == [o.score for o in awaited]


def test_plans_yield_submits_the_doors_can_drive() -> None:
    step = next(tasks.encode(_embedder(), ["x"], PoolingParams()))
    assert isinstance(step, Submit) and step.prompts == ["x"]
    assert set(TASKS) == {"embed", "score"}
