"""Ties a child process's life to its parent's (Linux).

Used by the supervised workers and by the test and benchmark harness, so that
even a parent killed outright (kill -9, a test timeout) leaves no child behind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from typing import Optional

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: Optional[int] = None) -> None:
    """Asks the kernel to SIGKILL this process when its parent exits.

    The request covers only a parent alive when it is made, so this process
    exits at once if its parent is already gone: ``parent_pid`` when given,
    else a parent that left this process to init.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        logger.debug("prctl(PR_SET_PDEATHSIG) unavailable")
        return
    parent = os.getppid()
    if (parent != parent_pid) if parent_pid is not None else (parent == 1):
        os._exit(1)
