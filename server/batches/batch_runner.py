"""``BatchRunner``: the asyncio task that runs batches, one at a time, oldest first, in the background.

    validating   read the input file; a malformed line is answered at once (the error file)
    in_progress  the lines not answered yet, a bounded window in flight, each through the app's own route
                 at batch priority (interactive requests go first); each answer appended to the progress
    finalizing   the output and error files written from the progress, in input line order
    completed    (or cancelled: cancel stops the window, aborts the lines in flight, keeps what was answered)

Stopping (shutdown, an engine that will take no work) leaves the batch in_progress on disk: the next
start-up resumes it without running its answered lines again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol

from server.batches.batch_store import ACTIVE, BatchStore, usage
from server.batches.file_store import FileNotFound, FileStore
from server.batches.input_lines import InputFileError, LineError, LineRequest, read_lines
from server.batches.line_dispatch import RouteDispatcher
from server.batches.progress import Progress
from wde.entrypoints.engine_thread import EngineUnavailableError

logger = logging.getLogger("wde.server.batches")

UNAVAILABLE = 503  # the engine takes no work (shutting down, or dead): stop, resume on the next start


class Startable(Protocol):
    """What the runner waits on before a batch: the server's engines (``ModelRegistry``) or one engine."""

    def wait_until_ready(self, timeout: float | None = None) -> None: ...


class BatchRunner:
    def __init__(
        self,
        files: FileStore,
        batches: BatchStore,
        dispatcher: RouteDispatcher,
        engine: Startable,
        is_draining: Callable[[], bool],
        max_lines_in_flight: int,
    ) -> None:
        self.files = files
        self.batches = batches
        self.dispatcher = dispatcher
        self.engine = engine
        self.is_draining = is_draining
        self.max_lines_in_flight = max_lines_in_flight
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._current: str | None = None  # the batch running now
        self._in_flight: set[asyncio.Task[None]] = set()
        self._cancelled = False  # the running batch was cancelled
        self._stopped = False  # the engine refused a line: stop until the next start-up
        self._skipped: set[str] = set()  # queued batches cancelled (and finalized) before their turn

    # ---- control (event loop) -----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="wde-batch-runner")

    async def stop(self) -> None:
        """Cancel the runner: lines in flight are aborted and not recorded (run again on resume)."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    def submit(self, batch_id: str) -> None:
        self._queue.put_nowait(batch_id)

    def is_running(self, batch_id: str) -> bool:
        return self._current == batch_id

    def cancel_running(self) -> None:
        """Cancel the running batch: stop its window, abort its lines in flight (call before setting it
        cancelling, so that the runner cannot set it in_progress after)."""
        self._cancelled = True
        for task in self._in_flight:
            task.cancel()

    async def cancel_queued(self, batch_id: str) -> None:
        """Cancel a batch that is not running: finalized now, skipped when its turn comes."""
        self._skipped.add(batch_id)
        progress = await asyncio.to_thread(Progress.open, self.batches.progress_path(batch_id))
        try:
            await self.finalize(batch_id, progress)
        finally:
            progress.close()

    # ---- the loop -----------------------------------------------------------------------------------
    async def _run(self) -> None:
        # 1. the engine loads on its own thread: wait for it (bounded waits, so a stop is never stuck)
        if not await self._engine_ready():
            return
        # 2. one batch at a time
        while not self._stopped:
            batch_id = await self._queue.get()
            if batch_id in self._skipped:
                continue
            self._current, self._cancelled = batch_id, False
            try:
                await self.run_batch(batch_id)
            except Exception:  # a bug: this batch waits for the next start-up, the others go on
                logger.exception("batch %s: the runner failed; it resumes on the next start-up", batch_id)
            finally:
                self._current = None

    async def _engine_ready(self) -> bool:
        while True:
            try:
                await asyncio.to_thread(self.engine.wait_until_ready, 1.0)
                return True
            except TimeoutError:
                continue
            except EngineUnavailableError as e:
                logger.warning("batches wait for the next start-up: %s", e)
                return False

    async def run_batch(self, batch_id: str) -> None:
        batch = self.batches.get(batch_id)
        if batch["status"] not in ACTIVE:
            return
        progress = await asyncio.to_thread(Progress.open, self.batches.progress_path(batch_id))
        try:
            if batch["status"] in ("validating", "in_progress"):
                # 1. validating: the lines, malformed ones answered at once
                requests = await self._validate(batch_id, progress)
                if requests is None:
                    return
                # 2. in_progress: the lines not answered yet, a window at a time
                await self._run_lines(batch_id, requests, progress)
                if self._stopped:
                    return  # stays in_progress: resumed on the next start-up
            # 3. finalizing: the output and error files
            await self.finalize(batch_id, progress)
        finally:
            progress.close()

    async def _validate(self, batch_id: str, progress: Progress) -> list[LineRequest] | None:
        batch = self.batches.get(batch_id)
        try:
            path = self.files.content_path(batch["input_file_id"])
            entries = read_lines(await asyncio.to_thread(path.read_bytes), batch["endpoint"])
        except (InputFileError, FileNotFound) as e:
            code = e.code if isinstance(e, InputFileError) else "missing_file"
            message = str(e) if isinstance(e, InputFileError) else f"input file {e} is gone; upload it again"
            errors = {
                "object": "list",
                "data": [{"code": code, "message": message, "param": None, "line": None}],
            }
            await self.batches.update(batch_id, status="failed", failed_at=int(time.time()), errors=errors)
            logger.warning("batch %s failed: %s", batch_id, message)
            return None
        for entry in entries:
            if isinstance(entry, LineError) and entry.line not in progress.answers:
                progress.add(entry.line, False, 0, _error_record(entry))
        counts = {"total": len(entries), "completed": progress.num_completed, "failed": progress.num_failed}
        if batch["status"] == "validating" and not self._cancelled:
            await self.batches.update(
                batch_id, status="in_progress", in_progress_at=int(time.time()), request_counts=counts
            )
        else:  # resumed: the counts of the answers kept
            await self.batches.update(batch_id, request_counts=counts)
        return [e for e in entries if isinstance(e, LineRequest) and e.line not in progress.answers]

    async def _run_lines(self, batch_id: str, requests: list[LineRequest], progress: Progress) -> None:
        endpoint = self.batches.get(batch_id)["endpoint"]
        try:
            for request in requests:
                while len(self._in_flight) >= self.max_lines_in_flight:
                    await asyncio.wait(self._in_flight, return_when=asyncio.FIRST_COMPLETED)
                if self._cancelled or self._stopped or self.is_draining():
                    break
                task = asyncio.create_task(self._run_line(batch_id, endpoint, request, progress))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)
            if self._in_flight:
                await asyncio.wait(self._in_flight)
        finally:  # the runner is stopped (cancelled): no line may answer after it
            await _cancel_all(self._in_flight)
        if self.is_draining():
            self._stopped = True

    async def _run_line(self, batch_id: str, endpoint: str, request: LineRequest, progress: Progress) -> None:
        try:
            answer = await self.dispatcher.post(endpoint, request.body)
        except asyncio.CancelledError:
            return  # cancelled or stopped: not answered, so run again if the batch resumes
        if answer.status_code == UNAVAILABLE:
            self._stopped = True
            logger.warning(
                "batch %s: the engine takes no work (%s); it resumes on the next start-up",
                batch_id,
                answer.body,
            )
            return
        ok = 200 <= answer.status_code < 300
        record = {
            "id": f"batch_req_{secrets.token_hex(12)}",
            "custom_id": request.custom_id,
            "response": {
                "status_code": answer.status_code,
                "request_id": f"req_{secrets.token_hex(12)}",
                "body": answer.body,
            },
            "error": None,
        }
        progress.add(request.line, ok, _total_tokens(answer.body) if ok else 0, record)
        self.batches.count(batch_id, ok)

    async def finalize(self, batch_id: str, progress: Progress) -> None:
        """The output and error files from ``progress``; then completed, or cancelled if cancelling."""
        batch = self.batches.get(batch_id)
        cancelling = batch["status"] == "cancelling" or (self._cancelled and self._current == batch_id)
        if not cancelling and batch["status"] != "finalizing":
            batch = await self.batches.update(batch_id, status="finalizing", finalizing_at=int(time.time()))
        output_file_id, error_file_id = await asyncio.to_thread(self._write_files, batch_id, progress)
        now = int(time.time())
        final = (
            {"status": "cancelled", "cancelled_at": now}
            if cancelling
            else {"status": "completed", "completed_at": now}
        )
        counts = {
            "total": batch["request_counts"]["total"],
            "completed": progress.num_completed,
            "failed": progress.num_failed,
        }
        await self.batches.update(
            batch_id,
            output_file_id=output_file_id,
            error_file_id=error_file_id,
            request_counts=counts,
            usage=usage(progress.num_tokens),
            **final,
        )
        progress.close()
        self.batches.progress_path(batch_id).unlink(missing_ok=True)
        logger.info(
            "batch %s %s: %d completed, %d failed",
            batch_id,
            final["status"],
            counts["completed"],
            counts["failed"],
        )

    def _write_files(self, batch_id: str, progress: Progress) -> tuple[str | None, str | None]:
        """(output file id, error file id); None where no line went there. The ids follow from the batch's,
        so finalizing again after a crash rewrites the same files."""
        ids: list[str | None] = []
        for ok, suffix in ((True, "output"), (False, "error")):
            if not progress.count(ok):
                ids.append(None)
                continue
            file_id = f"file-{batch_id.removeprefix('batch_')}-{suffix}"
            self.files.create(
                f"{batch_id}_{suffix}.jsonl", "batch_output", progress.records(ok), file_id=file_id
            )
            ids.append(file_id)
        return ids[0], ids[1]


async def _cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until each has ended (they end at once: a cancelled line just returns)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _error_record(entry: LineError) -> dict[str, Any]:
    return {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": entry.custom_id,
        "response": None,
        "error": {"code": entry.code, "message": entry.message},
    }


def _total_tokens(body: Any) -> int:
    tokens = body.get("usage", {}).get("total_tokens", 0) if isinstance(body, dict) else 0
    return tokens if isinstance(tokens, int) else 0
