"""The registered job backends: who may orchestrate a job (``--orchestrator``).

Adding an orchestrator: a module with a class that takes a
:class:`~torch_monarch.job.config.JobConfig` and satisfies
:class:`~torch_monarch.job.backend.JobBackend`, and one line in
:data:`BACKENDS`.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable

from torch_monarch.job.backend import JobBackend
from torch_monarch.job.config import JobConfig
from torch_monarch.launch.embedded import EmbeddedJob
from torch_monarch.monarch.client import MonarchJob

__all__ = ["BACKENDS", "make_backend", "stop_shielded"]

#: orchestrator name → backend (the first is the default)
BACKENDS: dict[str, Callable[[JobConfig], JobBackend]] = {
    "embedded": EmbeddedJob,  # torchrun's elastic agent per replica, supervised from this process
    "monarch": MonarchJob,  # real Monarch actors (pip install 'torch_monarch[monarch]')
}


def make_backend(config: JobConfig) -> JobBackend:
    """The backend ``config.orchestrator`` names."""
    try:
        factory = BACKENDS[config.orchestrator]
    except KeyError:
        raise ValueError(f"unknown orchestrator {config.orchestrator!r}; choose from {', '.join(BACKENDS)}") from None
    return factory(config)


def stop_shielded(job: JobBackend) -> None:
    """Stops ``job`` without letting a second Ctrl-C cut the stop short (replicas would be left behind)."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        job.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
