"""``Progress``: the answered lines of one batch, one JSON line each, appended as they finish.

A line is appended whole and flushed, so a restart reads every answer given before it (a crash can cut
only the last line, which is dropped and its input run again). Read back, it is the batch's state: which
input lines need no second run, the request counts, and (read from disk, one at a time, in input order)
the records of the output and error files. Memory holds a few numbers a line, never the records.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson


@dataclass(frozen=True)
class Answer:
    ok: bool  # True: a 2xx answer (the output file); False: the error file
    tokens: int  # tokens the answer used (the route's usage)
    offset: int  # where its line starts in the progress file
    size: int  # its bytes, newline included


@dataclass
class Progress:
    path: Path
    answers: dict[int, Answer] = field(default_factory=dict)  # by input line number (from 1)
    num_completed: int = 0
    num_tokens: int = 0
    _file: IO[bytes] | None = None
    _end: int = 0  # the file's size

    @classmethod
    def open(cls, path: Path) -> Progress:
        """The answers on disk so far; a torn last line (a crash mid-write) is cut off."""
        progress = cls(path)
        if not path.exists():
            return progress
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1  # whole lines only
        offset = 0
        while offset < end:
            size = data.index(b"\n", offset) + 1 - offset
            item = orjson.loads(data[offset : offset + size])
            progress._note(item["line"], Answer(item["ok"], item["tokens"], offset, size))
            offset += size
        if end < len(data):
            with path.open("r+b") as f:
                f.truncate(end)
        progress._end = end
        return progress

    @property
    def num_failed(self) -> int:
        return len(self.answers) - self.num_completed

    def add(self, line: int, ok: bool, tokens: int, record: dict[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        data = orjson.dumps({"line": line, "ok": ok, "tokens": tokens, "record": record}) + b"\n"
        self._file.write(data)
        self._file.flush()  # in the OS's hands: survives the process
        self._note(line, Answer(ok, tokens, self._end, len(data)))
        self._end += len(data)

    def count(self, ok: bool) -> int:
        return self.num_completed if ok else self.num_failed

    def records(self, ok: bool) -> Iterator[bytes]:
        """The output (``ok``) or error file's lines, in input line order, read from disk one by one."""
        if self._file is not None:
            self._file.flush()
        with self.path.open("rb") as f:
            for line in sorted(self.answers):
                answer = self.answers[line]
                if answer.ok != ok:
                    continue
                f.seek(answer.offset)
                yield orjson.dumps(orjson.loads(f.read(answer.size))["record"]) + b"\n"

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _note(self, line: int, answer: Answer) -> None:
        self.answers[line] = answer
        self.num_completed += answer.ok
        self.num_tokens += answer.tokens
