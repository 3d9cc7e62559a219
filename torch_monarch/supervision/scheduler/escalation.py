"""The failure a replica agent escalated, as its run directory holds it (``replicas/<id>/escalation.json``).

Every scheduler reads it the same way: the run directory is on the
submitting host (local) or on a filesystem the cluster's nodes share
(SLURM). A new allocation starts without the previous one's.
"""

from __future__ import annotations

import os
from typing import Optional

from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.rundir import RunDir, read_json

__all__ = ["forget_escalation", "read_escalation"]


def forget_escalation(run_dir: Optional[RunDir], replica_id: str) -> None:
    """Removes the previous allocation's escalation before a new one starts."""
    if run_dir is None:
        return
    try:
        os.unlink(run_dir.escalation_path(replica_id))
    except FileNotFoundError:
        pass


def read_escalation(run_dir: Optional[RunDir], replica_id: str) -> Optional[Failure]:
    """The failure the replica's agent escalated, if it wrote one."""
    if run_dir is None:
        return None
    data = read_json(run_dir.escalation_path(replica_id))
    return Failure.from_json(data) if data else None
