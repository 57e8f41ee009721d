"""``write_file_atomically``: a file that is either its old self or whole, through a crash or a power cut.

(``wde/bulk/atomic_file.py``, not yet committed when this was written, has the same idea for bulk jobs'
parquet parts: merge the two once it is.)"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def write_file_atomically(path: Path, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to a hidden file beside ``path``, fsync it, rename it over ``path``, fsync the folder;
    returns the bytes written."""
    tmp = path.with_name(f".tmp-{path.name}")
    num_bytes = 0
    with tmp.open("wb") as f:
        for chunk in chunks:
            num_bytes += f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return num_bytes
