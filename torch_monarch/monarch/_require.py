"""The one check that real Monarch (``torchmonarch``) is installed, and its poll default."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_SUPERVISION_POLL", "MonarchUnavailableError", "require_monarch"]

#: How often Monarch checks its procs for failures (Monarch's default is 10s).
#: Children inherit the variable, so one setting covers the whole job.
DEFAULT_SUPERVISION_POLL = "200ms"
_POLL_ENV = "HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY"


class MonarchUnavailableError(ImportError):
    """``torchmonarch`` is not installed; the message names the extra to install."""


def require_monarch() -> None:
    """Imports ``monarch.actor`` (setting the fast supervision poll first) or raises
    :class:`MonarchUnavailableError`."""
    os.environ.setdefault(_POLL_ENV, DEFAULT_SUPERVISION_POLL)
    try:
        import monarch.actor  # noqa: F401
    except ImportError as e:
        raise MonarchUnavailableError(
            f"the Monarch orchestrator needs torchmonarch ({e}); install it with: pip install 'torch_monarch[monarch]'"
        ) from e
