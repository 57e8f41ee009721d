"""``BatchService``: what the ``/v1/files`` and ``/v1/batches`` routes call; holds the stores and runner."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.requests import HTTPConnection

from server.batches.batch_runner import BatchRunner, Startable
from server.batches.batch_store import ACTIVE, CANCELLABLE, BatchStore, new_batch
from server.batches.file_store import FileStore
from server.batches.folder_lock import FolderLock
from server.batches.line_dispatch import RouteDispatcher
from server.batches.progress import Progress
from server.errors import BatchDirInUseError, BatchDirUnwritableError, BatchOwnerUnavailableError

logger = logging.getLogger("wde.server.batches")


class BatchConflictError(Exception):
    """The batch is in a status that does not allow the operation (cancel a completed batch)."""


class BatchService:
    def __init__(
        self,
        folder: Path,
        app: FastAPI,
        engine: Startable,
        is_draining: Callable[[], bool],
        max_lines_in_flight: int,
        runs_elsewhere: str = "",
    ) -> None:
        """``runs_elsewhere``: where another process of this server runs the folder's Batch API (an API worker
        of --api-workers N other than the one that runs it: its pipeline forwards the Batch API's requests
        there, ``server/batches/batch_link.py``); start() leaves the folder to it."""
        self.folder = folder
        self.runs_elsewhere = runs_elsewhere
        self.folder_lock: FolderLock | None = None  # held from start() to stop()
        # why this process serves no Batch API ("" while it is on): the routes answer 503 with it
        self.unavailable_reason = ""
        self.unavailable_error: type[Exception] = BatchDirUnwritableError
        self.files = FileStore(folder / "files")
        self.batches = BatchStore(folder / "batches")
        self.runner = BatchRunner(
            self.files, self.batches, RouteDispatcher(app), engine, is_draining, max_lines_in_flight
        )

    # ---- life cycle (the app's lifespan) ------------------------------------------------------------
    async def start(self) -> None:
        """Take the folder (one process per --batch-dir: two would run the same batches), load the batches
        on disk, queue the interrupted ones (oldest first), start the runner. A folder that cannot be
        written, or that another process holds, turns the Batch API off (one WARNING) and nothing else:
        the Batch API is optional, the server serves without it."""
        if self.runs_elsewhere:  # never reached by a request (forwarded before routing): 503 if ever
            self.unavailable_error = BatchOwnerUnavailableError
            self.unavailable_reason = f"the Batch API runs in {self.runs_elsewhere}"
            return
        try:
            self.folder_lock = await asyncio.to_thread(FolderLock.take, self.folder)
        except OSError as e:  # a read-only filesystem (docker run --read-only), a file in the way, ...
            self.unavailable_reason = (
                f"the Batch API is off: --batch-dir {self.folder} cannot be written ({e.strerror or e}); "
                "pass --batch-dir (WDE_BATCH_DIR) a writable folder, such as a mounted volume"
            )
        else:
            if self.folder_lock is None:
                self.unavailable_error = BatchDirInUseError
                self.unavailable_reason = (
                    f"the Batch API is off: another wde process uses --batch-dir {self.folder}; give each "
                    "server its own --batch-dir (Ray Serve replicas: run batches on a plain `wde serve`)"
                )
        if self.unavailable_reason:
            logger.warning("%s", self.unavailable_reason)
            return
        for batch in await asyncio.to_thread(self._load):
            if batch["status"] in ACTIVE:
                counts = batch["request_counts"]
                logger.info(
                    "batch %s resumes (%s): %d of %d lines answered",
                    batch["id"],
                    batch["status"],
                    counts["completed"] + counts["failed"],
                    counts["total"],
                )
                self.runner.submit(batch["id"])
        self.runner.start()

    async def stop(self) -> None:
        await self.runner.stop()
        if self.folder_lock is not None:
            self.folder_lock.release()

    def _load(self) -> list[dict[str, Any]]:
        batches = self.batches.load()
        for batch in batches:  # the counts a client sees before its batch's turn comes
            if batch["status"] in ACTIVE and batch["request_counts"]["total"]:
                progress = Progress.open(self.batches.progress_path(batch["id"]))
                batch["request_counts"].update(completed=progress.num_completed, failed=progress.num_failed)
        return batches

    # ---- batches --------------------------------------------------------------------------------------
    async def create_batch(
        self,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        model: str,
    ) -> dict[str, Any]:
        """A new batch, validating, queued behind the others. Raises FileNotFound, or ValueError for a file
        that is not a batch input."""
        file_object = self.files.get(input_file_id)
        if file_object["purpose"] != "batch":
            raise ValueError(
                f"input_file_id: file {input_file_id!r} has purpose {file_object['purpose']!r}; upload the "
                "requests with purpose 'batch'"
            )
        batch = new_batch(input_file_id, endpoint, completion_window, metadata, model)
        await self.batches.save(batch)
        self.runner.submit(batch["id"])
        return batch

    async def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        """cancelling, then cancelled once the lines in flight are aborted and the files written."""
        batch = self.batches.get(batch_id)
        if batch["status"] in ("cancelling", "cancelled"):
            return batch
        if batch["status"] not in CANCELLABLE:
            raise BatchConflictError(
                f"batch {batch_id} is {batch['status']}; only validating or in_progress ones can be cancelled"
            )
        running = self.runner.is_running(batch_id)
        if running:
            self.runner.cancel_running()
        batch = await self.batches.update(batch_id, status="cancelling", cancelling_at=int(time.time()))
        if not running:
            await self.runner.cancel_queued(batch_id)
        return self.batches.get(batch_id)


def get_batches(connection: HTTPConnection) -> BatchService:
    """The app's ``BatchService`` (``app.state.batches``), for a route handler; 503 when its folder cannot
    be written or another process holds it."""
    service: BatchService = connection.app.state.batches
    if service.unavailable_reason:
        raise service.unavailable_error(service.unavailable_reason)
    return service
