"""Giving the heap that large requests freed back to the system: one malloc arena, and a trim after them.

glibc gives each thread that allocates an arena of its own (up to 8 per core): the tokenizer's threads,
the threadpool's, the engine's. ``malloc_trim(0)`` hands back the free pages inside every arena, but a
thread arena's top chunk, where a burst's memory ends up once freed, only shrinks on a ``free`` past the
trim threshold, which glibc raises with each large free up to 64 MiB; ``malloc_trim`` trims the top of
the main arena only. Measured on a cold ``wde serve`` (bundled model; four /tokenize requests of 284,000
tokens at once, refused past --max-tokenize-tokens after tokenizing): RSS 450 -> 579 MiB, three thread
arenas of 124 MB each holding 40 KB in use, and ``malloc_trim(0)`` (called in the process with gdb) gave
back nothing. With one arena (``limit_malloc_arenas``, called first thing by ``wde serve``) every thread
allocates from the main heap, whose free pages and top the trim returns: 450 -> 457 MiB after the whole
round of tests/server/routes/test_tokenize_memory.py. Not glibc (musl, macOS): both are no-ops.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
from collections.abc import Callable

from wde.platforms.libc import glibc_malloc_trim, libc_function

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
TRIM_DELAY_SECONDS = 1.0  # a trim this long after a large request, once what it held is freed
_trim_pending = False  # a trim_soon is scheduled


def limit_malloc_arenas(max_arenas: int = 1) -> bool:
    """At most ``max_arenas`` glibc malloc arenas from now on (call before the process starts threads),
    unless MALLOC_ARENA_MAX set the number already. True when set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False  # the operator's choice, applied by glibc at start
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(M_ARENA_MAX, max_arenas))


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim(0)``; elsewhere a no-op). Call off
    the event loop: it walks the heap (a few ms to tens of ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim()


def trim_soon() -> None:
    """``release_freed_memory`` in the default executor ``TRIM_DELAY_SECONDS`` from now, when what the
    request held is freed; one pending trim at a time, and a request that ends while one is pending is
    covered by it (its memory is freed before the trim runs). Call on the event loop."""
    global _trim_pending
    if _trim_pending:
        return
    _trim_pending = True
    loop = asyncio.get_running_loop()

    def trim() -> None:
        global _trim_pending
        _trim_pending = False
        loop.run_in_executor(None, release_freed_memory)

    loop.call_later(TRIM_DELAY_SECONDS, trim)


async def trim_soon_async() -> None:
    """``trim_soon`` as a Starlette ``BackgroundTask`` (after the answer is sent)."""
    trim_soon()


@functools.cache
def _malloc_trim() -> Callable[[], int] | None:
    return glibc_malloc_trim()


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    mallopt: Callable[[int, int], int] | None = libc_function(
        "mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int
    )
    return mallopt
