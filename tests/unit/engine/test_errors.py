"""raise_for_errors: the first failed input named by position, its ValueError/TypeError type kept for input
errors, execution failures raised as RequestFailedError, and the count of the others."""

from __future__ import annotations

import numpy as np
import pytest

from wde.engine.errors import (
    InputTooLongError,
    OutputNotSupportedError,
    RequestFailedError,
    TaskNotSupportedError,
    raise_for_errors,
)
from wde.outputs import EmbeddingOutput, ErrorOutput


def _ok(request_id: str) -> EmbeddingOutput:
    return EmbeddingOutput(request_id, np.ones(1, dtype=np.float32), 3)


def test_nothing_raised_without_errors() -> None:
    raise_for_errors([_ok("a"), _ok("b")])
    raise_for_errors([])


def test_the_first_input_error_keeps_its_type_and_names_its_position() -> None:
    outputs = [_ok("a"), ErrorOutput("b", InputTooLongError("too long")), ErrorOutput("c", TypeError("bad"))]
    with pytest.raises(InputTooLongError, match=r"^inputs\[1\]: too long \(1 more inputs failed\)$") as info:
        raise_for_errors(outputs)
    assert isinstance(info.value.__cause__, InputTooLongError)


def test_an_execution_failure_is_a_request_failed_error() -> None:
    failure = ErrorOutput("a", RuntimeError("device lost"), is_input_error=False)
    with pytest.raises(RequestFailedError, match=r"inputs\[0\]: device lost"):
        raise_for_errors([failure])


def test_an_input_error_type_with_other_arguments_falls_back_to_value_error() -> None:
    class OddError(ValueError):
        def __init__(self, code: int, text: str) -> None:
            super().__init__(text)

    with pytest.raises(ValueError, match=r"inputs\[0\]: odd") as info:
        raise_for_errors([ErrorOutput("a", OddError(7, "odd"))])
    assert type(info.value) is ValueError


def test_the_hierarchy_callers_catch() -> None:
    assert issubclass(OutputNotSupportedError, TaskNotSupportedError)
    assert issubclass(TaskNotSupportedError, ValueError) and issubclass(InputTooLongError, ValueError)
