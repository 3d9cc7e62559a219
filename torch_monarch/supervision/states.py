"""The states a replica supervisor and a worker publish in the run directory.

One table each: :class:`SupervisorState` is ``agent.json``'s ``state`` (the
replica supervisor, embedded agent or ReplicaActor), :class:`WorkerState`
``rank<r>.json``'s (what the worker last reported). A scheduler's view of
an allocation is a third thing, :class:`~torch_monarch.supervision.scheduler.base.ReplicaState`.
"""

from __future__ import annotations

import enum

__all__ = ["ACTIVE_WORKER_STATES", "SupervisorState", "WorkerState"]


class SupervisorState(str, enum.Enum):
    """A replica supervisor's state (``replicas/<id>/agent.json``)."""

    _value_: str

    #: not started yet (no ``agent.json``)
    PENDING = "pending"
    #: the replica's workers run (the status view refines it from the workers' states)
    RUNNING = "running"
    #: a failure is handled: the workers restart in place after the policy's backoff
    RESTARTING = "restarting"
    #: the restart policy is spent; the workers are being stopped (embedded agent)
    ESCALATING = "escalating"
    #: the failure went to the orchestrator (``escalation.json`` holds it)
    ESCALATED = "escalated"
    #: the workers failed outside the restart policy (the agent itself gave up)
    FAILED = "failed"
    #: every worker finished
    SUCCEEDED = "succeeded"
    #: stopped by the orchestrator (the ReplicaActor's ``shutdown``)
    CANCELLED = "cancelled"


class WorkerState(str, enum.Enum):
    """A worker's state (``replicas/<id>/rank<r>.json``), as it last reported it."""

    _value_: str

    #: the process started (``init_worker``)
    STARTING = "starting"
    #: ready at the start barrier (``wait_for_start``)
    READY = "ready"
    #: in a training step; the hang probe's progress timeout applies
    TRAINING = "training"
    #: waiting for the quorum or for other replicas: not a hang of this worker
    SYNCING = "syncing"
    #: recovering its state from a donor replica
    HEALING = "healing"
    #: finished training
    DONE = "done"


#: states of a worker in its training loop (drills and standby meshes wait for them)
ACTIVE_WORKER_STATES: frozenset[WorkerState] = frozenset({WorkerState.TRAINING, WorkerState.SYNCING})
