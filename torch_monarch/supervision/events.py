"""The run directory's event names: the one table of ``events.jsonl``'s ``event`` values.

Every event is one JSON line ``{"t": <time.time()>, "event": <name>, ...}``
(:meth:`~torch_monarch.supervision.rundir.RunDir.event`); the fields each
one carries are listed here next to its name. ``replica`` is a replica id.
A training script may add events of its own names (``supervision.worker.event``).
"""

from __future__ import annotations

import enum

__all__ = ["Event"]


class Event(str, enum.Enum):
    """An event name; the comment above each lists its fields and who writes it."""

    _value_: str

    # -- the job (launcher / job backend) --------------------------------------
    #: replicas, orchestrator, scheduler, lighthouse (embedded only)
    JOB_STARTED = "job_started"
    #: succeeded, orchestrator (monarch only)
    JOB_STOPPED = "job_stopped"
    #: pid, lighthouse, lighthouse_pid: the Monarch OrchestrationManager is up
    ORCHESTRATION_STARTED = "orchestration_started"
    #: scheduler, job_id: the Monarch backend's hosts are allocated (--scheduler slurm)
    ALLOCATION_STARTED = "allocation_started"

    # -- the orchestrator ------------------------------------------------------
    #: replica, allocation, scheduler, handle
    REPLICA_SUBMITTED = "replica_submitted"
    #: replica: the replica's allocation ended successfully
    REPLICA_FINISHED = "replica_finished"
    #: replica, kind, message: an escalated replica gets a new allocation
    REPLICA_REPLACING = "replica_replacing"
    #: replica, remaining, kind: the job goes on without the replica
    REPLICA_DROPPED = "replica_dropped"
    #: replica, kind, message: too few replicas would remain
    JOB_FAILED = "job_failed"

    # -- a replica supervisor (embedded agent or ReplicaActor) -----------------
    #: replica, attempt, pids
    WORKERS_STARTED = "workers_started"
    #: replica, attempt, pids: a standby trainer mesh is ready (monarch)
    STANDBY_READY = "standby_ready"
    #: replica, pid (embedded: also preload): the replica's worker forkserver is up
    FORKSERVER_READY = "forkserver_ready"
    #: replica, pid, local_rank, reason: the hang probe killed a worker
    HANG_DETECTED = "hang_detected"
    #: replica and Failure.event_fields() (monarch also: orchestrator, source, monarch)
    DETECTED = "detected"
    #: replica, delay_s, restarts, kind, who
    RESTART_SCHEDULED = "restart_scheduled"
    #: replica, by, kind: the restart policy is spent
    ESCALATED = "escalated"
    #: replica
    REPLICA_SUCCEEDED = "replica_succeeded"

    # -- a worker (torch_monarch.supervision.worker) ---------------------------
    #: replica, rank, pid, attempt
    WORKER_STARTED = "worker_started"
    #: replica, rank, pid, kind, error_type, message, failed_ranks
    WORKER_ERROR = "worker_error"
    #: replica, rank, pid, kind, drill_id: the worker ran a drill command
    INJECTED = "injected"

    # -- failure drills (torch_monarch.launch.inject) --------------------------
    #: id, kind, replica, rank, pid, planned_s
    INJECT = "inject"

    # -- the demo's training script and runner (torch_monarch.demo) ------------
    #: replica, rank, pid: the replica's process group is up
    GROUP_READY = "group_ready"
    #: replica, rank, pid, sync, sync_every: TorchFT's Manager is up
    MANAGER_READY = "manager_ready"
    #: replica, rank, pid, quorum_id, participants, step: a new quorum
    QUORUM = "quorum"
    #: replica, rank, pid, step, quorum_id, participants, work_kept: a sync was not committed
    SYNC_FAILED = "sync_failed"
    #: replica, rank, pid, step, quorum_id: a restarted replica recovered its state from a donor
    HEALED = "healed"
    #: replica, rank, pid, step, quorum_id, participants: back in a full commit
    REJOINED = "rejoined"
    #: phase: the measured window starts / ends
    WINDOW_START = "window_start"
    WINDOW_END = "window_end"
    #: step: every worker is asked to stop at that step
    STOP_REQUESTED = "stop_requested"
