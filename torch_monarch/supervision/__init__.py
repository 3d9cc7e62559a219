"""Supervision tree for fault-tolerant training (after Monarch's supervision).

::

    Orchestrator                 root: replaces failed replicas through a Scheduler,
      │                          or goes on with fewer while >= min_replicas
      └── ReplicaSupervisor × N  one per replica group: restarts the replica's
            │                    workers in place under a RestartPolicy
            └── workers          report errors with tracebacks, progress, drills

A failure travels up as a :class:`Failure`. Each :class:`Supervisor`'s
``supervise(failure) -> bool`` returns True when it handled the failure and
False to escalate it to its parent.

Worker-side API (a no-op outside a supervised job): :func:`supervised`,
:func:`report_training_error`, :func:`report_progress`, :func:`record_step`,
:func:`stop_requested`, :func:`wait_for_start`, :func:`register_drill`,
:func:`worker_context`.
"""

from torch_monarch.supervision.failure import Failure, FailureKind, root_cause
from torch_monarch.supervision.orchestrator import Orchestrator
from torch_monarch.supervision.policy import Backoff, RestartBudget, RestartPolicy
from torch_monarch.supervision.probes import HangConfig, HangProbe
from torch_monarch.supervision.replica import ReplicaOptions, run_replica
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler import LocalScheduler, ReplicaSpec, ReplicaState, Scheduler
from torch_monarch.supervision.supervisor import Supervisor
from torch_monarch.supervision.worker import (
    InjectedFailure,
    WorkerContext,
    init_worker,
    record_step,
    register_drill,
    report_progress,
    report_training_error,
    stop_requested,
    supervised,
    wait_for_start,
    worker_context,
)

__all__ = [
    "Backoff",
    "Failure",
    "FailureKind",
    "HangConfig",
    "HangProbe",
    "InjectedFailure",
    "LocalScheduler",
    "Orchestrator",
    "ReplicaOptions",
    "ReplicaSpec",
    "ReplicaState",
    "ReplicaSupervisor",
    "RestartBudget",
    "RestartPolicy",
    "RunDir",
    "Scheduler",
    "Supervisor",
    "WorkerContext",
    "init_worker",
    "record_step",
    "register_drill",
    "report_progress",
    "report_training_error",
    "root_cause",
    "run_replica",
    "stop_requested",
    "supervised",
    "wait_for_start",
    "worker_context",
]
