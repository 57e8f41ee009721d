"""``OUT/_log.jsonl``: one JSON line per event (a run starts, a chunk is handed to the engine, a part is
written, a run ends), appended and flushed, so that what a restart re-embedded can be counted: the texts
of "begin" lines beyond the records of the input."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

JOURNAL_NAME = "_log.jsonl"


class Journal:
    def __init__(self, folder: Path) -> None:
        self.path = folder / JOURNAL_NAME
        self._file = self.path.open("a", encoding="utf-8")

    def record(self, event: str, **fields: Any) -> None:
        line = {"time": round(time.time(), 3), "event": event, "pid": os.getpid(), **fields}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    @staticmethod
    def read(folder: Path) -> list[dict[str, Any]]:
        path = folder / JOURNAL_NAME
        if not path.exists():
            return []
        events = []
        for line in path.read_text(encoding="utf-8").split("\n"):  # not splitlines(): JSON keeps U+2028
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # the last line, cut by a crash
                continue
        return events
