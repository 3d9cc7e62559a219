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

__all__ = ["make_process_group"]

logger: logging.Logger = logging.getLogger(__name__)


def _monarch_group(timeout: timedelta) -> Any:
    from torch_monarch.torchft import ProcessGroupMonarch

    return ProcessGroupMonarch(timeout=timeout)


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
