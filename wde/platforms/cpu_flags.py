"""``cpu_flags()``: the ISA flags the kernel reports for this CPU (``/proc/cpuinfo``; a hypervisor may hide
some that the silicon has). Speed paths choose by them: the varlen attention kernel, the int8 GEMM; the
benchmarks print them (``benchmarks/cpu_info.py``)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
FLAGS_LINE = re.compile(r"^(?:flags|Features)\s*:\s*(.*)$", re.MULTILINE)  # x86 / ARM


def parse_cpu_flags(cpuinfo_text: str) -> frozenset[str]:
    """Every flag of the first CPU in a ``/proc/cpuinfo`` text (``flags`` on x86, ``Features`` on ARM)."""
    match = FLAGS_LINE.search(cpuinfo_text)
    return frozenset(match.group(1).split()) if match else frozenset()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """e.g. {"avx2", "fma", "avx512f", "avx512_vnni", ...}; empty where ``/proc/cpuinfo`` is missing."""
    try:
        return parse_cpu_flags(CPUINFO.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return frozenset()
