"""An output directory of ``wde embed``: part files, the manifest, the log, and a lock so that one run at a
time writes it.

    OUT/
      _manifest.json        the fingerprint and settings; complete, num_rows once every record is written
      _log.jsonl            runs, chunks begun, parts written
      _lock                 held (flock) by the running command; the kernel drops it when the process dies
      part-000000.parquet   id, embedding, num_tokens: written whole (tmp file, fsync, rename) or not at all
      part-000001.parquet   ...

``pyarrow.parquet.read_table(OUT)`` and ``pandas.read_parquet(OUT)`` read the parts as one table (names
starting with "_" or "." are skipped).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from wde.bulk.atomic_file import remove_temporary_files
from wde.bulk.journal import Journal
from wde.bulk.manifest import MANIFEST_NAME, Manifest
from wde.bulk.parts import PartStore

LOCK_NAME = "_lock"


class OutputDir:
    """Open with ``OutputDir.open``; ``close()`` releases the lock."""

    def __init__(self, folder: Path, manifest: Manifest, lock_fd: int) -> None:
        self.folder = folder
        self.manifest = manifest
        self._lock_fd = lock_fd
        self.num_stale_files = remove_temporary_files(folder)
        self.parts = PartStore(folder)
        self.journal = Journal(folder)

    @classmethod
    def open(cls, folder: str | Path, fingerprint: str, settings: dict[str, Any]) -> OutputDir:
        """Create the directory, or check that it was made with the same fingerprint (else
        ``FingerprintMismatchError`` naming the settings that differ)."""
        folder = Path(folder).expanduser().resolve()
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--output {folder} is a file; wde embed writes a directory of parquet parts")
        folder.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(folder)
        try:
            manifest = Manifest.read(folder)
            if manifest is None:
                if any(not path.name.startswith(".") for path in folder.iterdir() if path.name != LOCK_NAME):
                    raise ValueError(
                        f"--output {folder} holds files but no {MANIFEST_NAME}: it was not made by wde "
                        "embed; pass a new or empty directory"
                    )
                manifest = Manifest(fingerprint, settings)
                manifest.write(folder)
            else:
                manifest.check_matches(fingerprint, settings, folder)
            return cls(folder, manifest, lock_fd)
        except BaseException:
            os.close(lock_fd)
            raise

    def record_input(self, settings: dict[str, Any]) -> None:
        """The input changed (same format and fields, its written records unchanged): note its new size and
        hash in the manifest (no longer complete until this run ends)."""
        self.manifest.settings = settings
        self.manifest.complete = False
        self.manifest.write(self.folder)

    def mark_complete(self, num_rows: int, embedding_dim: int | None) -> None:
        self.manifest.complete = True
        self.manifest.num_rows = num_rows
        self.manifest.embedding_dim = embedding_dim or self.manifest.embedding_dim
        self.manifest.write(self.folder)

    def close(self) -> None:
        self.journal.close()
        os.close(self._lock_fd)


def _lock(folder: Path) -> int:
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ValueError(
            f"{folder} is being written by another wde embed (pid {holder}); wait for it or stop it"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
