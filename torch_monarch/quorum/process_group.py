"""The process group a replica uses across replicas (TorchFT's ``pg=``).

One switch, ``MONARCH_FT_PG``: ``monarch`` (default) is
``torch_monarch.torchft.ProcessGroupMonarch``; ``gloo`` is TorchFT's own
``ProcessGroupGloo``, for comparisons. Both need TorchFT
(``pip install 'torch_monarch[ft]'`` or ``'torch_monarch[ft-nightly]'``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Optional

__all__ = ["make_process_group"]


def make_process_group(kind: Optional[str] = None, timeout: timedelta = timedelta(seconds=60)) -> Any:
    """A reconfigurable TorchFT process group of ``kind`` (default ``$MONARCH_FT_PG`` or monarch)."""
    kind = (kind or os.environ.get("MONARCH_FT_PG") or "monarch").lower()
    if kind == "monarch":
        from torch_monarch.torchft import ProcessGroupMonarch  # names the extra when TorchFT is missing

        return ProcessGroupMonarch(timeout=timeout)
    if kind != "gloo":
        raise ValueError(f"MONARCH_FT_PG must be 'monarch' or 'gloo', got {kind!r}")
    try:
        from torchft.process_group import ProcessGroupGloo
    except ImportError as e:
        raise ImportError("MONARCH_FT_PG=gloo needs TorchFT: pip install 'torch_monarch[ft]'") from e
    return ProcessGroupGloo(timeout=timeout)
