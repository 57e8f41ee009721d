"""Keep a loaded server's heap out of Python's full garbage collections.

A loaded ``wde serve`` holds about 330,000 objects the cyclic garbage collector tracks (torch, transformers,
FastAPI, the model's modules), almost none of which becomes garbage while the model is loaded. Each full
(oldest generation) collection walks all of them: 120-200 ms with the GIL held, on whichever thread allocated
last, usually the event loop. Under load that came every ~3,000 requests: a 200 ms stall of every request in
flight, and ~0.09 CPU-ms per request, a fifth of the event loop's work (2 cores, bundled MiniLM, one short
query per request at concurrency 32; docs/benchmarks.md).

So once a model is loaded, ``freeze_heap`` collects what loading left behind and moves every object alive
then into the permanent generation (``gc.freeze``), which collections skip; what requests allocate is
collected as before. After a model is unloaded (a swap) and when the server stops, ``thaw_heap`` puts
them back (``gc.unfreeze``), so that the unloaded model's reference cycles are collected; the next load
freezes again (its collection, ~200 ms with the GIL held, is paid once per load). vLLM's engine core and API
server freeze their start-up heap the same way; an API worker (``wde serve --api-workers N``) freezes once its
app is built.

Frozen, the collector also runs less often: a young collection after 20,000 new container objects instead of
700 (``SERVING_THRESHOLDS``). At 700 a loaded server collected every few requests, walking the objects of the
requests in flight each time; at 20,000 a one-text request costs 15-25% less CPU in an API worker and in a
single-process server (2 cores, tiny BERT, ``benchmarks.serve_cost``, four interleaved runs; the young
generation then holds at most a few MB). ``thaw_heap`` restores the thresholds it found.

Only server processes freeze (``wde serve`` and its Ray Serve replicas): the in-process ``LLM`` leaves its
host's collector alone.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

# (young, middle, old) collection thresholds while a model is loaded and frozen (gc.set_threshold)
SERVING_THRESHOLDS = (20_000, 20, 100)
_thresholds_before: tuple[int, int, int] | None = None  # what thaw_heap restores


def freeze_heap() -> None:
    """Collect the garbage there is, then freeze every object alive: collections skip them from now on; the
    young generation is collected at ``SERVING_THRESHOLDS`` until ``thaw_heap``."""
    global _thresholds_before
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    if _thresholds_before is None:
        _thresholds_before = gc.get_threshold()
        gc.set_threshold(*SERVING_THRESHOLDS)
    logger.info(
        "froze %d objects out of the garbage collector's full collections (%.0f ms)",
        gc.get_freeze_count(),
        (time.perf_counter() - start) * 1000,
    )


def thaw_heap() -> None:
    """Give the frozen objects back to the collector (a model unloaded, the server stopped), at the
    collection thresholds it had before."""
    global _thresholds_before
    gc.unfreeze()
    if _thresholds_before is not None:
        gc.set_threshold(*_thresholds_before)
        _thresholds_before = None


def frozen_after(build: Callable[[], T]) -> Callable[[], T]:
    """``build``, then ``freeze_heap``: on an engine thread, before the engine reports ready, so that no
    request to it waits on the collection."""

    def build_and_freeze() -> T:
        built = build()
        freeze_heap()
        return built

    return build_and_freeze
