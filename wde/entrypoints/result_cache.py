"""``ResultCache``: finished outputs by key, least recently used first out, bounded by their real size.

An entry's size is what it holds in memory: the output's objects and arrays (``sys.getsizeof``, walked
through dataclass fields, dicts, lists and tuples), its key (the text or token ids, the params) and the
cache's own bookkeeping per entry (``ENTRY_OVERHEAD_BYTES``). ``num_bytes`` never passes ``max_bytes``:
entries are evicted before one is added, and an output larger than the whole cache is not kept.

Outputs are copied in and copied out (arrays included, ``metrics`` dropped: a hit did not run), so a caller
that changes what it got (``decode`` filling a sparse output's ``tokens``, an in-place array operation)
never changes the cache, and hits are told apart by ``metrics is None``.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wde.outputs import RequestOutput

MIB = 2**20
# The ordered dict's node and table slot, the entry tuple and the key tuple, per entry (measured on
# CPython 3.11 with tracemalloc: tests/entrypoints/test_llm_result_cache.py checks the sum stays above the
# truth).
ENTRY_OVERHEAD_BYTES = 256


@dataclass(frozen=True)
class CacheStats:
    max_bytes: int
    num_bytes: int
    num_entries: int
    num_hits: int  # inputs answered from the cache
    num_misses: int  # inputs looked up and not found (then run)
    num_evictions: int


class ResultCache:
    def __init__(self, max_bytes: int) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.num_bytes = 0
        self.num_hits = 0
        self.num_misses = 0
        self.num_evictions = 0
        self._lock = threading.Lock()  # callers on several threads (a scrape reads stats) see whole updates
        self._entries: OrderedDict[Hashable, tuple[RequestOutput, int]] = (
            OrderedDict()
        )  # key -> (output, size)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> RequestOutput | None:
        """A copy of the output kept for ``key`` (now the most recently used), or None (a miss)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.num_misses += 1
                return None
            self._entries.move_to_end(key)
            self.num_hits += 1
        return copy_output(entry[0])  # the kept output is never changed: copied outside the lock

    def put(self, key: Hashable, output: RequestOutput, key_bytes: int | None = None) -> bool:
        """Keep a copy of ``output`` for ``key``, evicting the least recently used entries to make room;
        False when it is larger than the whole cache (not kept). ``key_bytes``: what the key holds apart
        from objects every key shares (default: all of ``size_of(key)``)."""
        kept = copy_output(output, drop_metrics=True)
        size = size_of(kept) + (size_of(key) if key_bytes is None else key_bytes) + ENTRY_OVERHEAD_BYTES
        if size > self.max_bytes:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.num_bytes -= old[1]
            while self.num_bytes + size > self.max_bytes:
                _, (_, evicted_size) = self._entries.popitem(last=False)
                self.num_bytes -= evicted_size
                self.num_evictions += 1
            self._entries[key] = (kept, size)
            self.num_bytes += size
        return True

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.max_bytes,
                self.num_bytes,
                len(self._entries),
                self.num_hits,
                self.num_misses,
                self.num_evictions,
            )


def copy_output(value: Any, drop_metrics: bool = False) -> Any:
    """A copy sharing nothing mutable with ``value``: arrays copied, dataclasses rebuilt field by field,
    dicts / lists / tuples copied; strings, numbers and exceptions shared. ``drop_metrics``: ``metrics``
    fields become None."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            field.name: None
            if drop_metrics and field.name == "metrics"
            else copy_output(getattr(value, field.name), drop_metrics)
            for field in dataclasses.fields(value)
            if field.init
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {key: copy_output(item, drop_metrics) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_output(item, drop_metrics) for item in value]
    if isinstance(value, tuple):
        return tuple(copy_output(item, drop_metrics) for item in value)
    return value


def size_of(value: Any) -> int:
    """Bytes ``value`` holds: its own object plus what it refers to (arrays with their data; singletons and
    small cached ints cost nothing more than the reference)."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, np.ndarray):
        return sys.getsizeof(value) + (0 if value.flags.owndata else value.nbytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = sys.getsizeof(value) + (sys.getsizeof(vars(value)) if hasattr(value, "__dict__") else 0)
        return own + sum(size_of(getattr(value, field.name)) for field in dataclasses.fields(value))
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(key) + size_of(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(size_of(item) for item in value)
    return sys.getsizeof(value)
