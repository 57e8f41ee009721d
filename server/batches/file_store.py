"""``FileStore``: OpenAI file objects and their contents under ``<batch dir>/files`` (atomic writes)."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from wde.bulk.atomic_file import write_atomically

FILE_ID = re.compile(r"^file-[A-Za-z0-9_-]{1,64}$")


class FileNotFound(LookupError):
    """No file with this id (or an id that cannot be one)."""


@dataclass(frozen=True)
class FileStore:
    folder: Path

    @staticmethod
    def new_id() -> str:
        return f"file-{secrets.token_hex(12)}"

    def create(
        self, filename: str, purpose: str, content: bytes | Iterable[bytes], file_id: str | None = None
    ) -> dict[str, Any]:
        """Store ``content`` (bytes, or chunks written as they come) and its file object: the content first,
        so that a file object always has its content."""
        # the content, then the object that points at it
        self.folder.mkdir(parents=True, exist_ok=True)
        file_id = file_id or self.new_id()
        chunks = [content] if isinstance(content, bytes) else content
        num_bytes = 0

        def write(f: BinaryIO) -> None:
            nonlocal num_bytes
            for chunk in chunks:
                num_bytes += f.write(chunk)

        write_atomically(self._content_path(file_id), write)
        file_object = {
            "id": file_id,
            "object": "file",
            "bytes": num_bytes,
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }
        write_atomically(self._object_path(file_id), lambda f: f.write(orjson.dumps(file_object)))
        return file_object

    def get(self, file_id: str) -> dict[str, Any]:
        path = self._object_path(self._checked(file_id))
        try:
            return orjson.loads(path.read_bytes())
        except FileNotFoundError:
            raise FileNotFound(file_id) from None

    def content_path(self, file_id: str) -> Path:
        self.get(file_id)  # raises FileNotFound
        return self._content_path(file_id)

    def list(self) -> list[dict[str, Any]]:
        """Every file object, newest first."""
        if not self.folder.is_dir():
            return []
        objects = [orjson.loads(path.read_bytes()) for path in self.folder.glob("file-*.json")]
        return sorted(objects, key=lambda item: (item["created_at"], item["id"]), reverse=True)

    def _checked(self, file_id: str) -> str:
        if not FILE_ID.match(file_id):
            raise FileNotFound(file_id)
        return file_id

    def _content_path(self, file_id: str) -> Path:
        return self.folder / f"{file_id}.jsonl"

    def _object_path(self, file_id: str) -> Path:
        return self.folder / f"{file_id}.json"
