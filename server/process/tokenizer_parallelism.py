"""``tokenizers``' own thread pool, off in ``wde serve``'s processes.

Each ``encode_batch`` call of more than a few texts wakes ``tokenizers``' rayon pool, one thread a core,
and its threads spin a while before they sleep again. In process, over large calls, that pool is the
parallelism. In a server the calls are small (one step's few texts, or one request's) and come often, so
on a many-core host the pool mostly spins, on the cores the event loop, the forward and the clients need.
Measured on an H200 machine (16 host cores, all-MiniLM-L6-v2 float16, docs/benchmarks.md): the one-process
server answered 1,635 one-text requests/s with the pool and 2,339 without (call 3 of issue 36); with 32
texts a request its tokenizer threads kept 11.6 cores busy for 8,224 texts/s (1.4 ms of CPU a text, where
the tokenizer alone takes 28 µs), and each of 4 API workers 2.6 cores for 5,200 texts/s. Without the pool,
the engine's tokenizer threads (the cores minus one on a GPU: ``wde.engine.tokenizer_pool``) and the API
worker processes are the parallelism.

On 2 cores the pool spins little and pays: 32 texts a request at concurrency 16, interleaved, medians of 3
(AMD EPYC, tiny model): the one-process server spent 1,880 CPU-µs a request without it against 2,100 with
it (requests/s within noise), but 2 API workers 1,620 against 1,420 and answered 561 requests/s against 698.
So the pool goes off only from ``MIN_CORES`` usable cores (between the 2 and the 16 measured).

``tokenizers`` reads the variable at each call, so setting it before the first call is enough; the API worker
and engine processes inherit it. An operator's ``TOKENIZERS_PARALLELISM`` wins. The in-process ``LLM`` keeps
the pool.
"""

from __future__ import annotations

import os

from wde.platforms.cores import usable_cores

VARIABLE = "TOKENIZERS_PARALLELISM"
MIN_CORES = 8


def serial_tokenizer_calls(num_cores: int | None = None) -> bool:
    """Set ``TOKENIZERS_PARALLELISM=false`` for this process and its children on a host of ``MIN_CORES`` or
    more usable cores (``num_cores``: this process's, by default); True when set, False when the operator
    chose a value or the host is smaller."""
    if VARIABLE in os.environ or (num_cores if num_cores is not None else usable_cores()) < MIN_CORES:
        return False
    os.environ[VARIABLE] = "false"
    return True
