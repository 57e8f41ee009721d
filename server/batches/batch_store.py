"""``BatchStore``: OpenAI batch objects under ``<batch dir>/batches``, in memory and on disk.

Routes read the objects in memory (what the runner updates as lines finish); every change of status is
written to disk atomically before it is visible, so a restart finds the last status a client saw.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from wde.bulk.atomic_file import write_atomically

BATCH_ID = re.compile(r"^batch_[A-Za-z0-9_-]{1,64}$")
COMPLETION_WINDOW_SECONDS = 24 * 3600
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")  # resumed on start-up
CANCELLABLE = ("validating", "in_progress")


class BatchNotFound(LookupError):
    """No batch with this id (or an id that cannot be one)."""


def new_batch(
    input_file_id: str, endpoint: str, completion_window: str, metadata: dict[str, str] | None, model: str
) -> dict[str, Any]:
    """A batch object as OpenAI's, status ``validating``."""
    now = int(time.time())
    return {
        "id": f"batch_{secrets.token_hex(12)}",
        "object": "batch",
        "endpoint": endpoint,
        "model": model,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": completion_window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + COMPLETION_WINDOW_SECONDS,
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "usage": None,
        "metadata": metadata,
    }


def usage(num_tokens: int) -> dict[str, Any]:
    """OpenAI's batch usage: every token is an input token here."""
    return {
        "input_tokens": num_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": num_tokens,
    }


@dataclass
class BatchStore:
    folder: Path
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def load(self) -> list[dict[str, Any]]:
        """Read every batch object from disk (blocking); returns them oldest first."""
        if self.folder.is_dir():
            for path in self.folder.glob("batch_*.json"):
                batch = orjson.loads(path.read_bytes())
                self.batches[batch["id"]] = batch
        return sorted(self.batches.values(), key=lambda batch: (batch["created_at"], batch["id"]))

    def get(self, batch_id: str) -> dict[str, Any]:
        batch = self.batches.get(batch_id) if BATCH_ID.match(batch_id) else None
        if batch is None:
            raise BatchNotFound(batch_id)
        return batch

    def list(self) -> list[dict[str, Any]]:
        """Newest first, as OpenAI lists them."""
        return sorted(
            self.batches.values(), key=lambda batch: (batch["created_at"], batch["id"]), reverse=True
        )

    async def save(self, batch: dict[str, Any]) -> None:
        """Write a new ``batch`` to disk (off the event loop), then show it."""
        async with self._lock:
            await asyncio.to_thread(self._write, batch["id"], orjson.dumps(batch))
            self.batches[batch["id"]] = batch

    async def update(self, batch_id: str, **changes: Any) -> dict[str, Any]:
        """The batch with ``changes``, on disk before it is shown (a client never sees a status that a
        restart could take back). ``request_counts`` is shared with the shown object: counted in place."""
        async with self._lock:
            batch = {**self.batches[batch_id], **changes}
            await asyncio.to_thread(self._write, batch_id, orjson.dumps(batch))
            self.batches[batch_id] = batch
            return batch

    def count(self, batch_id: str, ok: bool) -> None:
        """One more answered line (in memory; a restart recounts from the progress file)."""
        counts = self.batches[batch_id]["request_counts"]
        counts["completed" if ok else "failed"] += 1

    def progress_path(self, batch_id: str) -> Path:
        return self.folder / f"{batch_id}.progress"

    def _write(self, batch_id: str, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(self.folder / f"{batch_id}.json", lambda f: f.write(data))
