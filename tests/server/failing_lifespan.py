"""``python -m tests.server.failing_lifespan serve ...``: ``wde serve`` whose app lifespan fails after its
engine started loading (the Batch API's start raises), for the start-up exit test: the process must exit
non-zero with one error line, not die by a signal with an engine thread still running."""

from __future__ import annotations

import sys

from server.batches.service import BatchService
from server.cli import main

FAILURE = "injected failure of the Batch API's start"


async def _failing_start(self: BatchService) -> None:
    raise RuntimeError(FAILURE)


if __name__ == "__main__":
    BatchService.start = _failing_start  # type: ignore[method-assign]
    sys.exit(main())
