"""``usable_cores()``: the CPU cores this process may run on (its affinity mask, which a container's
cpuset or ``taskset`` narrows), else the machine's count where the OS has no affinity call."""

from __future__ import annotations

import os


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
