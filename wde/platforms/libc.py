"""``libc_function``, ``glibc_malloc_trim``: functions of the process's C library through ctypes, or None
where the library or the function is missing (glibc-only calls such as ``malloc_trim`` and ``mallopt`` on
musl or macOS)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any


def libc_function(name: str, argtypes: list[Any], restype: Any) -> Any | None:
    """e.g. ``libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)``."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = restype
    return function


def glibc_malloc_trim() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of the C library, or None where it has none (not glibc)."""
    trim = libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return None if trim is None else lambda: trim(0)
