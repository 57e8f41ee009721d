"""An engine process (``wde serve --api-workers``'s) for tests, and ``AsyncLLMEngine``s in this process
over it: what an API worker runs, driven in process by httpx's ASGI transport."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from server.engine_link.client import EngineLink
from server.engine_link.in_flight import InFlightSlots
from server.launch.supervisor import EngineStart
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
    """A started engine process serving ``engine_args`` and one ready remote engine per model, started as
    ``wde serve --api-workers`` starts it (``EngineStart``: the engine process reads the configs)."""
    start = EngineStart(engine_args, settings or ServerSettings(), "warning")
    try:
        served = start.configs()
    except BaseException:
        start.end()
        raise
    start.serve("http://linked-engine.test")  # only named in its log and metrics
    start.slots.index = 0
    calibrations = [Calibration.from_file(args.calibration_file) for args, _ in served]
    link = EngineLink("test0", start.ipc_dir, start.alive, calibrations=calibrations)
    engines = [link.engine(index, args, config) for index, (args, config) in enumerate(served)]
    LINKS.update({id(engine): link for engine in engines})
    try:
        for engine in engines:
            engine.start()
        for engine in engines:
            engine.wait_until_ready(timeout=180)
        yield EngineProcess(link, start.process, start.slots, start.ipc_dir), engines
    finally:
        for engine in engines:
            LINKS.pop(id(engine), None)
            engine.shutdown(timeout=60)
        link.close()
        start.process.terminate()  # SIGTERM, as the supervisor stops it
        start.process.join(60)
        if start.process.is_alive():
            start.process.kill()
            start.process.join()
        start.remove_folder()
