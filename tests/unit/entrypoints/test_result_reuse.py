"""ResultReuse over a fake submitter: duplicates in one submission run once, later submissions hit the
cache, keys resolve the model's defaults, errors are not kept, and unkeyable inputs bypass reuse."""

from __future__ import annotations

import numpy as np

from tests.unit.engine.conftest import FakeSubmitter, make_model_config
from wde.entrypoints.result_reuse import ResultReuse, prompt_key
from wde.inputs import PoolingParams


def _reuse() -> ResultReuse:
    config = make_model_config()
    config.pooling.normalize = True
    return ResultReuse(config, cache_size_mib=1)


def test_duplicates_run_once_and_later_calls_hit_the_cache() -> None:
    reuse, submit = _reuse(), FakeSubmitter()
    outputs = reuse.submit(submit, ["a", "b", "a"], PoolingParams())
    assert submit.submissions[0][0] == ["a", "b"]
    np.testing.assert_array_equal(outputs[0].embedding, outputs[2].embedding)
    assert outputs[0].embedding is not outputs[2].embedding  # each input its own copy
    again = reuse.submit(submit, ["b", "c"], PoolingParams())
    assert submit.submissions[1][0] == ["c"]
    np.testing.assert_array_equal(again[0].embedding, submit.vector("b"))
    stats = reuse.stats()
    assert stats.num_deduplicated == 1 and stats.num_hits == 1


def test_the_model_defaults_are_part_of_the_key() -> None:
    reuse = _reuse()
    # the model normalizes: an unset normalize and normalize=True share entries, normalize=False does not
    assert reuse.params_key(PoolingParams()) == reuse.params_key(PoolingParams(normalize=True))
    assert reuse.params_key(PoolingParams()) != reuse.params_key(PoolingParams(normalize=False))


def test_errors_are_not_kept() -> None:
    reuse, submit = _reuse(), FakeSubmitter(fail_on="bad")
    reuse.submit(submit, ["bad"], PoolingParams())
    reuse.submit(submit, ["bad"], PoolingParams())
    assert [prompts for prompts, _ in submit.submissions] == [["bad"], ["bad"]]


def test_inputs_that_cannot_be_keyed_bypass_reuse() -> None:
    assert prompt_key({"prompt_token_ids": [1, 2]}) is not None
    assert prompt_key(["not", "an", "input"]) is None
    reuse, submit = _reuse(), FakeSubmitter()
    assert reuse.split([["odd"]], PoolingParams()) is None
    reuse.submit(submit, ["x", "x"], PoolingParams())
    assert submit.submissions[0][0] == ["x"]
