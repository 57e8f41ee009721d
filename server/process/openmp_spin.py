"""How long an idle OpenMP thread spins before it sleeps, bounded for ``wde serve``.

libgomp (the OpenMP runtime of torch's Linux wheels) keeps a thread that finished its share of a parallel
region spinning for ``GOMP_SPINCOUNT`` iterations (300,000 by default: several milliseconds here) before it
sleeps, so that the next region starts without a wake-up. In process that costs nothing; in a server the
forward's helper thread spins after every step while the event loop, the tokenizer and the clients need
the core. Measured on 2 cores (AMD EPYC, AVX2; bundled MiniLM, one short query per request, concurrency
32, one interleaved run, median of 3): server CPU 7.21 ms per request by default, 6.22 at 30,000, 6.08 at
10,000, 6.06 at 3,000; requests/s 245.5, 272.8, 274.4, 267.9 (the helper thread's own CPU per request fell
below the forward thread's). 10,000 iterations still cover the gaps between the operators of one forward
pass, so the forward keeps its speed.

libgomp reads the variable once, when it is loaded with torch: ``bound_openmp_spin`` must run before
anything imports torch (``wde serve`` calls it first). An operator's ``GOMP_SPINCOUNT`` or
``OMP_WAIT_POLICY`` wins. The in-process ``LLM`` keeps the runtime's default.
"""

from __future__ import annotations

import os
import sys

SERVER_SPIN_COUNT = 10_000


def bound_openmp_spin(spin_count: int = SERVER_SPIN_COUNT) -> bool:
    """Set ``GOMP_SPINCOUNT`` for this process (and its children); True when set. Not set when the
    operator chose a spin count or wait policy, or when torch (with libgomp) is already loaded."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    if "torch" in sys.modules:
        return False  # too late: libgomp has read its environment
    os.environ["GOMP_SPINCOUNT"] = str(spin_count)
    return True
