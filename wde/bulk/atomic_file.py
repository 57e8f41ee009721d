"""Writing a file so that it is either absent or whole, through a crash or a power cut: write a hidden
temporary file beside it, fsync it, rename it over the name, fsync the folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"  # hidden: pyarrow / pandas read_parquet(folder) skip names starting with "." or "_"


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}")
    with tmp.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temporary_files(folder: Path) -> int:
    """Delete what an interrupted write left behind; returns how many."""
    stale = list(folder.glob(f"{TMP_PREFIX}*"))
    for path in stale:
        path.unlink()
    return len(stale)
