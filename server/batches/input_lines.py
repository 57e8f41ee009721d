"""``read_lines``: a batch input file (JSONL) into the requests to run and the lines that cannot run.

Each line is ``{"custom_id": str, "method": "POST", "url": <the batch's endpoint>, "body": {...}}``, as
OpenAI's batch input. A line that is not such an object gets an error record (the error file) and the
batch goes on; its body is checked by the route itself when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

MAX_LINES = 50_000  # OpenAI's limit of requests in one batch
MAX_CUSTOM_ID_CHARS = 512


class InputFileError(ValueError):
    """The file as a whole cannot be a batch (empty, too many lines, not UTF-8): the batch fails."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class LineRequest:
    line: int  # from 1
    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    line: int
    custom_id: str | None
    code: str
    message: str


def read_lines(content: bytes, endpoint: str) -> list[LineRequest | LineError]:
    """One entry per non-blank line, in order."""
    # 1. the file as a whole
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(
            "invalid_file", f"the input file is not UTF-8 (byte {e.start}); upload UTF-8 JSONL"
        ) from None
    numbered = [(number, line) for number, line in enumerate(jsonl_lines(text), 1) if line.strip()]
    if not numbered:
        raise InputFileError("empty_file", "the input file has no lines; upload one JSON request per line")
    if len(numbered) > MAX_LINES:
        raise InputFileError(
            "too_many_requests",
            f"the input file has {len(numbered)} requests, more than {MAX_LINES}; split it into batches",
        )
    # 2. each line
    entries: list[LineRequest | LineError] = []
    seen: set[str] = set()
    for number, line in numbered:
        entry = _read_line(number, line, endpoint, seen)
        if isinstance(entry, LineRequest):
            seen.add(entry.custom_id)
        entries.append(entry)
    return entries


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text: split on ``\n`` only, a trailing ``\r`` dropped. Not ``str.splitlines()``,
    which also splits at U+2028, U+2029, U+0085 and other characters JSON strings may hold unescaped (orjson
    and ``json.dumps(ensure_ascii=False)`` write them as they are)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def _read_line(number: int, line: str, endpoint: str, seen: set[str]) -> LineRequest | LineError:
    try:
        item = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        return LineError(
            number,
            None,
            "invalid_json_line",
            f"line {number} is not valid JSON ({e}); send one object a line",
        )
    if not isinstance(item, dict):
        return LineError(number, None, "invalid_request", f"line {number} is not a JSON object")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        return LineError(
            number,
            None,
            "missing_custom_id",
            f"line {number}: custom_id must be a non-empty string of at most {MAX_CUSTOM_ID_CHARS} chars",
        )
    problem = _problem(item, endpoint, custom_id, seen)
    if problem is not None:
        code, message = problem
        return LineError(number, custom_id, code, f"line {number}: {message}")
    return LineRequest(number, custom_id, item["body"])


def _problem(item: dict[str, Any], endpoint: str, custom_id: str, seen: set[str]) -> tuple[str, str] | None:
    if custom_id in seen:
        return "duplicate_custom_id", f"custom_id {custom_id!r} is used by an earlier line; make each unique"
    unknown = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if unknown:
        return "invalid_request", f"unknown fields {unknown}; a line has custom_id, method, url, body"
    if item.get("method") != "POST":
        return "invalid_method", f'method is {item.get("method")!r}; use "POST"'
    if item.get("url") != endpoint:
        return "invalid_url", f"url is {item.get('url')!r}, but this batch's endpoint is {endpoint!r}"
    if not isinstance(item.get("body"), dict):
        return "invalid_body", "body must be a JSON object (the request body of the endpoint)"
    return None
