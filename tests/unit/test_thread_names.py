"""wde's threads carry their Python names to the OS (``top -H``, ``/proc/PID/task/TID/comm``), cut to Linux's
15 bytes; a thread pool's through its initializer."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from wde.thread_names import name_os_thread

pytest.importorskip("setproctitle", reason="setproctitle (the server extra) names the OS threads")
if not Path("/proc/self/task").is_dir():
    pytest.skip("the OS thread names are read from Linux's /proc", allow_module_level=True)


def _os_name() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def test_a_thread_takes_its_python_name_cut_to_15_bytes() -> None:
    seen: list[str] = []

    def target() -> None:
        name_os_thread()
        seen.append(_os_name())

    thread = threading.Thread(target=target, name="wde-engine-monitor")
    thread.start()
    thread.join()
    assert seen == ["wde-engine-moni"]


def test_a_pool_thread_is_named_by_its_initializer() -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="wde-forward", initializer=name_os_thread) as pool:
        assert pool.submit(_os_name).result() == "wde-forward_0"
