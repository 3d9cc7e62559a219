"""JobBackend: what an orchestrator does with a :class:`~torch_monarch.job.config.JobConfig`.

A backend is constructed from the config alone and driven by the launcher
(``monarch-run``) or the demo: ``dryrun`` (its own plan, nothing started),
``start``, ``poll`` until it returns False, ``stop``; then the outcome.
Status, events and failure drills go through the run directory, the same
for every backend. Adding an orchestrator is one module with a class that
satisfies this protocol and one line in :mod:`torch_monarch.launch.backends`.
"""

from __future__ import annotations

from typing import Optional, Protocol

from torch_monarch.supervision.failure import Failure

__all__ = ["JobBackend"]


class JobBackend(Protocol):
    """An orchestrator of one job; see the module docstring."""

    #: the quorum service's address, once started
    lighthouse_address: str

    def dryrun(self) -> str:
        """What ``start`` would run, in the backend's own terms."""
        ...

    def start(self) -> None:
        """Starts the quorum service (unless the job names one) and every replica."""
        ...

    def poll(self) -> bool:
        """One supervision pass; True while the job is still running."""
        ...

    def stop(self) -> None:
        """Stops every replica and what the backend started; safe to call twice."""
        ...

    @property
    def succeeded(self) -> bool:
        """Every replica finished (or was dropped while ``min_replicas`` remained)."""
        ...

    @property
    def fatal(self) -> Optional[Failure]:
        """The replica failure that ended the job, if one did."""
        ...

    @property
    def failure_message(self) -> Optional[str]:
        """Why the job ended without a replica failure to show (e.g. the quorum service failed)."""
        ...
