"""``name_os_thread``: the calling thread's Python name (``wde-engine``, ``wde-forward_0``, ...) given to the
OS thread too, so that ``top -H``, ``ps -L``, ``perf`` and ``/proc/PID/task/TID/comm`` tell wde's threads
apart (``benchmarks/serve_cost.py --per-thread`` reads them). Linux keeps the first 15 bytes. It goes through
setproctitle's ``setthreadtitle`` (a dependency of the server extra); without setproctitle installed it
does nothing."""

from __future__ import annotations

import threading

MAX_OS_NAME_BYTES = 15  # Linux's TASK_COMM_LEN less its terminating zero


def name_os_thread() -> None:
    """Call first thing in a thread's target (or as a ``ThreadPoolExecutor`` initializer)."""
    try:
        from setproctitle import setthreadtitle
    except ImportError:
        return
    setthreadtitle(threading.current_thread().name.encode()[:MAX_OS_NAME_BYTES].decode(errors="ignore"))
