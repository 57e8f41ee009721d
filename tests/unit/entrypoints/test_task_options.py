"""``task_options``: each task's options declared once and turned into ``PoolingParams`` in one place; an
unknown option is refused as Python refuses an unknown keyword, naming the call and what it takes."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.llm import LLM
from wde.entrypoints.task_options import ClassifyOptions, EncodeOptions, ScoreOptions, pooling_params
from wde.inputs import PoolingParams

OPTION_SETS = [EncodeOptions, ScoreOptions, ClassifyOptions]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda t: t.__name__)
def test_every_option_is_a_pooling_params_field(options: type) -> None:
    fields = {field.name for field in dataclasses.fields(PoolingParams)}
    assert set(options.__annotations__) <= fields


def test_score_takes_classify_options_and_its_own() -> None:
    assert set(ClassifyOptions.__annotations__) < set(ScoreOptions.__annotations__)
    assert {"instruction", "long_input", "chunk_score"} <= set(ScoreOptions.__annotations__)


def test_options_become_pooling_params() -> None:
    options = {"output": ["dense", "sparse"], "precision": "float32", "dimensions": 8}
    assert pooling_params(options, EncodeOptions, "encode") == PoolingParams(
        output=("dense", "sparse"), dimensions=8
    )
    assert pooling_params({}, ScoreOptions, "score") == PoolingParams()
    assert pooling_params({"raw_scores": True}, ClassifyOptions, "classify").raw_scores is True


def test_an_unknown_option_is_refused_naming_the_call() -> None:
    with pytest.raises(TypeError, match=r"score\(\) got unexpected keyword argument\(s\) 'normalize'"):
        pooling_params({"normalize": True}, ScoreOptions, "score")
    with pytest.raises(TypeError, match=r"'normalise'.*it takes: normalize"):
        pooling_params({"normalise": True}, EncodeOptions, "encode")


@pytest.mark.parametrize("task", ["encode", "score", "rerank", "classify"])
def test_llm_and_the_async_engine_take_the_same_options(task: str) -> None:
    def options_of(cls: type) -> str:
        parameter = inspect.signature(getattr(cls, task)).parameters["options"]
        assert parameter.kind is inspect.Parameter.VAR_KEYWORD
        return str(parameter.annotation)

    assert options_of(LLM) == options_of(AsyncLLMEngine)
