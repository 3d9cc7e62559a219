"""The process group a replica uses across replicas (TorchFT's ``pg=``).

One switch, ``MONARCH_FT_PG``: ``monarch`` (default) is
``torch_monarch.torchft.ProcessGroupMonarch``; ``gloo`` is TorchFT's own
``ProcessGroupGloo``, for comparisons and as a fallback while the monarch
group is unavailable.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

__all__ = ["make_process_group"]

logger: logging.Logger = logging.getLogger(__name__)


class _SettledWork(dist._Work):
    """A Work whose ``wait()`` returns only once its future is completed too.

    TorchFT's ``Manager.allreduce`` chains callbacks on ``work.get_future()``
    right after ``work.wait()`` and assumes the future is done by then
    (otherwise its ``_ManagedWork`` chain fails an assertion and the step is
    discarded). The monarch backend's Work currently wakes ``wait()`` just
    before it completes the future (csrc/backend/work.cc, ``markSuccess``);
    until that ordering is fixed there, this closes the gap.
    """

    def __init__(self, work: dist._Work) -> None:
        super().__init__()
        self._work = work

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        if timeout is None:
            self._work.wait()
        else:
            self._work.wait(timeout)
        self._work.get_future().wait()
        return True

    def get_future(self) -> torch.futures.Future[Any]:
        return self._work.get_future()

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self) -> Any:
        return self._work.exception()


def _monarch_group(timeout: timedelta) -> Any:
    from torch_monarch.torchft import ProcessGroupMonarch

    class _ProcessGroupMonarch(ProcessGroupMonarch):
        def allreduce(self, tensors: Any, opts: Any) -> dist._Work:  # type: ignore[override]
            return _SettledWork(super().allreduce(tensors, opts))

    return _ProcessGroupMonarch(timeout=timeout)


def make_process_group(kind: Optional[str] = None, timeout: timedelta = timedelta(seconds=60)) -> Any:
    """A reconfigurable TorchFT process group of ``kind`` (default ``$MONARCH_FT_PG`` or monarch)."""
    kind = (kind or os.environ.get("MONARCH_FT_PG") or "monarch").lower()
    if kind == "monarch":
        try:
            return _monarch_group(timeout)
        except ImportError as e:
            logger.warning("ProcessGroupMonarch unavailable (%s); using torchft's ProcessGroupGloo", e)
    elif kind != "gloo":
        raise ValueError(f"MONARCH_FT_PG must be 'monarch' or 'gloo', got {kind!r}")
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)
