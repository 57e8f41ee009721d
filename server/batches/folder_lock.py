"""``FolderLock``: one process at a time runs the Batch API of a --batch-dir (an advisory ``flock`` on its
``lock`` file, released by the OS when the process dies, so a crash never leaves the folder locked)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class FolderLock:
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, folder: Path) -> FolderLock | None:
        """The folder's lock, or None when another process holds it; ``OSError`` when the folder cannot be
        made or written (a read-only filesystem)."""
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
