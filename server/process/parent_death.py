"""``end_with_parent``: an engine process or API worker gets SIGTERM when the ``wde serve`` process that
started it dies, however it dies (SIGKILL, OOM killer), so no worker keeps serving the port and no engine
keeps the device after its parent is gone. Linux's ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing happens
(the parent's SIGTERM path still stops them)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal

from wde.platforms.libc import libc_function

logger = logging.getLogger("wde.server")

PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int) -> None:
    """Ask for SIGTERM at the parent's death; if it died before we asked, act on it now."""
    prctl = libc_function("prctl", [ctypes.c_int, ctypes.c_ulong], ctypes.c_int)
    if prctl is None or prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        logger.debug("no prctl(PR_SET_PDEATHSIG) here: this process outlives a killed parent")
        return
    if os.getppid() != parent_pid:  # the parent is already gone: the signal will never come
        os.kill(os.getpid(), signal.SIGTERM)
