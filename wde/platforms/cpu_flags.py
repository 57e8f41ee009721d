"""``cpu_flags()``: the ISA flags the kernel reports for this CPU (``/proc/cpuinfo``; a hypervisor may hide
some that the silicon has). Speed paths choose by them: the varlen attention kernel, the int8 GEMM."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def cpu_flags() -> frozenset[str]:
    """e.g. {"avx2", "fma", "avx512f", "avx512_vnni", ...}; empty where ``/proc/cpuinfo`` is missing."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()
