"""An engine process (``wde serve --api-workers``'s) for tests, and ``AsyncLLMEngine``s in this process
over it: what an API worker runs, driven in process by httpx's ASGI transport."""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from server.engine_link import engine_process
from server.engine_link.client import EngineLink
from server.engine_link.in_flight import InFlightSlots
from server.settings import ServerSettings
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.output_precision import Calibration

LINKS: dict[int, EngineLink] = {}  # id(remote engine) -> its link, for the apps made over it


def link_of(engine: AsyncLLMEngine) -> EngineLink | None:
    """The engine link of a remote engine made here (None: a local engine)."""
    return LINKS.get(id(engine))


@dataclass
class EngineProcess:
    link: EngineLink
    process: multiprocessing.process.BaseProcess
    slots: InFlightSlots
    ipc_dir: str  # where its sockets are (another worker's link connects there)


@contextmanager
def engine_process_over(
    engine_args: list[EngineArgs], settings: ServerSettings | None = None
) -> Iterator[tuple[EngineProcess, list[AsyncLLMEngine]]]:
    """A started engine process serving ``engine_args`` and one ready remote engine per model."""
    context = multiprocessing.get_context("spawn")
    served = [(args, args.create_engine_config()) for args in engine_args]
    ipc_dir = tempfile.mkdtemp(prefix="wde-test-link-")
    slots = InFlightSlots(1, context)
    slots.index = 0
    alive_read, alive_write = context.Pipe(duplex=False)
    process = context.Process(
        target=engine_process.main,
        args=(served, settings or ServerSettings(), ipc_dir, "warning", slots, alive_write),
        name="wde-test-engine",
    )
    process.start()
    alive_write.close()
    calibrations = [Calibration.from_file(args.calibration_file) for args, _ in served]
    link = EngineLink("test0", ipc_dir, alive_read, calibrations=calibrations)
    engines = [link.engine(index, args, config) for index, (args, config) in enumerate(served)]
    LINKS.update({id(engine): link for engine in engines})
    try:
        for engine in engines:
            engine.start()
        for engine in engines:
            engine.wait_until_ready(timeout=180)
        yield EngineProcess(link, process, slots, ipc_dir), engines
    finally:
        for engine in engines:
            LINKS.pop(id(engine), None)
            engine.shutdown(timeout=60)
        link.close()
        process.terminate()
        process.join(60)
        if process.is_alive():
            process.kill()
        shutil.rmtree(ipc_dir, ignore_errors=True)
