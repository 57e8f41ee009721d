"""CPU seconds of each of ``wde serve``'s processes, by role, and the names ``ps`` shows for them.

One process serves as ``server``; with ``--api-workers N`` the parent is ``supervisor``, the engine process
``engine`` and the API workers ``api-1`` .. ``api-N``. Each process is named ``wde-<role>`` (setproctitle:
the command line and the kernel's comm, so ``ps``, ``top`` and benchmarks/serve_cost.py tell them apart).
``/metrics`` shows ``wde_process_cpu_seconds{role=...}``: the engine process reads its own CPU time and its
parent's, and the API workers report theirs with their HTTP observations.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import setproctitle
from prometheus_client.core import CounterMetricFamily, Metric

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def name_process(role: str) -> None:
    """``wde-<role>`` in ``ps`` (the command line) and ``top`` / ``/proc/PID/comm``."""
    setproctitle.setproctitle(f"wde-{role}")


def cpu_seconds_of(pid: int, tid: int | None = None) -> float | None:
    """utime + stime of another process, every thread, or of its thread ``tid`` (Linux ``/proc``; None where
    it cannot be read: the process or thread ended)."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    try:
        fields = stat.read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14 and 15


class ProcessCpuCollector:
    """``wde_process_cpu_seconds{role}``: this process's CPU time under ``role``, the ``reported`` ones of
    other processes (the API workers'), and the ``parent``'s read from /proc."""

    def __init__(self, role: str, parent_pid: int | None = None) -> None:
        self.role = role
        self.parent_pid = parent_pid
        self.reported: dict[str, float] = {}  # role -> CPU seconds, as last reported

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "wde_process_cpu_seconds",
            "CPU time (user + system, every thread) of each of the server's processes: server (one "
            "process), or supervisor, engine and api-N (--api-workers)",
            labels=["role"],
        )
        family.add_metric([self.role], time.process_time())
        if self.parent_pid is not None:
            parent = cpu_seconds_of(self.parent_pid)
            if parent is not None:
                family.add_metric(["supervisor"], parent)
        for role, seconds in sorted(self.reported.items()):
            family.add_metric([role], seconds)
        yield family
