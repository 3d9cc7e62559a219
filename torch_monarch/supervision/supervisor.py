"""The supervision contract, after Monarch's supervision trees.

A child's failure goes to its parent's :meth:`Supervisor.supervise`. The
parent either handles it locally and returns True (restart the replica's
workers in place, replace a replica, carry on with fewer replicas) or
returns False, and :meth:`Supervisor.handle` passes the failure on to the
grandparent. A failure that reaches the root unhandled ends the job.

The tree in torch_monarch::

    Orchestrator                 (root: replaces replicas, keeps >= min_replicas)
      └── ReplicaSupervisor × N  (restarts its replica's workers in place)
            └── workers          (report their errors, then exit)
"""

from __future__ import annotations

import abc
import logging
from typing import Optional

from torch_monarch.supervision.failure import Failure

__all__ = ["Supervisor"]

logger: logging.Logger = logging.getLogger(__name__)


class Supervisor(abc.ABC):
    """A node of the supervision tree.

    Args:
        name: how this supervisor appears in logs and in
            ``Failure.escalated_by``.
        parent: the supervisor to escalate to; ``None`` for the root, and
            for a supervisor whose parent lives in another process (the
            replica agent escalates by exiting, see ``ReplicaSupervisor``).
    """

    def __init__(self, name: str, parent: Optional["Supervisor"] = None) -> None:
        self.name = name
        self.parent = parent

    @abc.abstractmethod
    def supervise(self, failure: Failure) -> bool:
        """Handles a child's failure: True when handled, False to escalate."""

    def handle(self, failure: Failure) -> bool:
        """Supervises ``failure`` here, escalating up the tree while declined.

        Returns True when some supervisor handled it, False when it reached
        the root unhandled.
        """
        if self.supervise(failure):
            return True
        escalated = failure.escalated(self.name)
        if self.parent is None:
            logger.error("%s: failure not handled at the root: %s", self.name, failure.describe())
            return False
        logger.warning("%s: escalating to %s: %s", self.name, self.parent.name, failure.describe())
        return self.parent.handle(escalated)
