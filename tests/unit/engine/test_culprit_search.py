"""CulpritSearch alone: bisection finds every culprit, innocents keep their outputs, the number of extra
passes stays within the documented bound, and a transient failure fails nobody."""

from __future__ import annotations

import math

import pytest

from tests.unit.engine.conftest import FakeRunner, make_request
from wde.engine.culprit_search import CulpritSearch
from wde.engine.errors import RequestFailedError
from wde.engine.forward_clock import ForwardClock


@pytest.mark.parametrize("culprits", [{0}, {5}, {1, 6}, {0, 1, 2, 3, 4, 5, 6, 7}])
def test_every_culprit_is_found_and_innocents_keep_their_outputs(culprits: set[int]) -> None:
    num_requests = 8
    requests = [make_request(f"r{i}", [10 * i + 1]) for i in range(num_requests)]
    runner = FakeRunner(poisoned={f"r{i}" for i in culprits})
    outputs, errors = CulpritSearch(runner, ForwardClock()).run(requests, RuntimeError("batch failed"))
    assert set(errors) == culprits
    for row in range(num_requests):
        if row in culprits:
            assert outputs[row] is None
            assert isinstance(errors[row], RequestFailedError)
            assert "forward pass failed" in str(errors[row])
            assert isinstance(errors[row].__cause__, Exception)
        else:
            assert outputs[row] == float(10 * row + 1)
    # the module's bound: at most 2 * k * log2(n) extra passes, 2n - 1 when every row fails
    bound = (
        2 * num_requests - 1 if len(culprits) == num_requests else 2 * len(culprits) * math.log2(num_requests)
    )
    assert len(runner.batches) <= bound


def test_a_transient_failure_fails_nobody() -> None:
    requests = [make_request(f"r{i}", [i]) for i in range(4)]
    outputs, errors = CulpritSearch(FakeRunner(), ForwardClock()).run(requests, RuntimeError("once"))
    assert errors == {}
    assert outputs == [0.0, 1.0, 2.0, 3.0]


def test_a_single_request_is_blamed_without_a_retry() -> None:
    runner = FakeRunner(poisoned={"only"})
    error = RuntimeError("boom")
    outputs, errors = CulpritSearch(runner, ForwardClock()).run([make_request("only")], error)
    assert outputs == [None]
    assert errors[0].__cause__ is error
    assert runner.batches == []
