"""Retrying a failed batch without its culprits, so that one bad input fails only itself.

A batch whose forward pass (or batch building) raised is split in halves and each half run again; a half
that fails is split again, until every failing request runs alone. Innocent requests get their outputs
from the half that succeeded; each culprit gets a ``RequestFailedError`` naming the failure. Cost: for k
culprits in a batch of n, at most 2·k·log2(n) extra passes (2n - 1 when everything fails, e.g. a lost
device: each of those fails fast).

Logging: the batch's traceback once (error), one line per culprit (warning), its traceback at debug.
"""

from __future__ import annotations

import logging
from typing import Any

from wde.engine.errors import RequestFailedError
from wde.engine.forward_clock import ForwardClock
from wde.request import Request

logger = logging.getLogger(__name__)


def run_batch(runner: Any, requests: list[Request], clock: ForwardClock) -> list[Any]:
    """Build and run one batch (``runner`` is the executor's ``ModelRunner``); raises what they raise."""
    batch = runner.prepare_inputs(requests)
    with clock:
        outputs: list[Any] = runner.execute_model(batch)
    return outputs


class CulpritSearch:
    def __init__(self, runner: Any, clock: ForwardClock) -> None:
        self.runner = runner
        self.clock = clock

    def run(self, requests: list[Request], error: Exception) -> tuple[list[Any], dict[int, Exception]]:
        """(one output per request, None where it failed; row -> the error of each culprit) for a batch
        that raised ``error``."""
        outputs: list[Any] = [None] * len(requests)
        errors: dict[int, Exception] = {}
        logger.error(
            "a forward pass of %d requests (%d tokens) failed%s",
            len(requests),
            _num_tokens(requests),
            "; retrying it without the failing input" if len(requests) > 1 else "",
            exc_info=error,
        )
        self._bisect(requests, 0, len(requests), error, outputs, errors)
        if len(requests) > 1 and not errors:
            logger.warning("every request of the failed batch succeeded on retry (a transient failure)")
        return outputs, errors

    def _bisect(
        self,
        requests: list[Request],
        start: int,
        end: int,
        error: Exception,
        outputs: list[Any],
        errors: dict[int, Exception],
    ) -> None:
        """Rows [start, end) failed together with ``error``: find which of them fail alone."""
        if end - start == 1:
            errors[start] = self._blame(requests[start], error)
            return
        middle = (start + end) // 2
        for low, high in ((start, middle), (middle, end)):
            try:
                outputs[low:high] = run_batch(self.runner, requests[low:high], self.clock)
            except Exception as half_error:
                self._bisect(requests, low, high, half_error, outputs, errors)

    def _blame(self, request: Request, error: Exception) -> RequestFailedError:
        logger.warning(
            "request %s (%s tokens) fails the forward pass on its own: %r",
            request.request_id,
            request.num_tokens if request.is_tokenized else "?",
            error,
        )
        logger.debug("traceback of request %s's failure", request.request_id, exc_info=error)
        failed = RequestFailedError(f"the forward pass failed for this input: {error!r}")
        failed.__cause__ = error
        return failed


def _num_tokens(requests: list[Request]) -> int:
    return sum(request.num_tokens for request in requests if request.is_tokenized)
