"""run_replica: one replica's workers on this host, under a :class:`ReplicaSupervisor`.

One replica group (e.g. the 2 workers of replica 0) is run by one elastic
agent per host (:class:`MonarchAgent`). Any worker failure, a crash, an
exception, a hang or a collective error inside the replica, stops all of
its workers; the supervisor then restarts them in place, while the other
replicas carry on in a smaller quorum. The restarted workers heal from a
healthy replica and rejoin (TorchFT's Manager does that part).

Past its :class:`RestartPolicy` the supervisor declines; the agent stops the
workers and :func:`run_replica` reports the failure to the orchestrator,
which replaces the replica or carries on without it.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence, Union

from torch_monarch._config import coerce_durations
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.policy import RestartPolicy
from torch_monarch.supervision.preload import PreloadError, start_forkserver
from torch_monarch.supervision.probes import HangConfig
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.states import SupervisorState

__all__ = ["ReplicaOptions", "run_replica"]

logger: logging.Logger = logging.getLogger(__name__)

#: Exit code of a replica agent whose supervisor escalated a failure.
EXIT_ESCALATED = 3


@dataclass
class ReplicaOptions:
    """How ``run_replica`` runs one replica's agent on this host.

    Attributes:
        replica_id: this replica's id (``MONARCH_REPLICA_ID`` for workers).
        policy: restart policy of the replica supervisor.
        hang: hang probe settings.
        run_dir: the job's run directory, if any.
        preload: modules the forkserver imports once, so restarted workers
            fork with them loaded (``start_method="forkserver"`` only; a
            module that initialises CUDA is refused, see ``cuda_clean``).
        env: extra environment for the workers.
        stop_timeout: SIGTERM grace when stopping workers (a number is seconds).
    """

    replica_id: str = "0"
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    hang: HangConfig = field(default_factory=HangConfig)
    run_dir: Optional[RunDir] = None
    preload: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        coerce_durations(self)


def _plain_torch_log_format() -> None:
    """Gives torch's log handlers a plain formatter in this (agent) process.

    torch's ``TorchLogsFormatter`` imports ``torch._dynamo`` the first time it
    formats a record with an exception: 2 to 5 s on a loaded host, and the
    elastic agent logs an exception exactly when a worker has just died,
    which delayed failure detection by that much.
    """
    plain = logging.Formatter("[%(asctime)s %(name)s %(levelname)s] %(message)s")
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in lg.handlers:
            if type(handler.formatter).__name__ == "TorchLogsFormatter":
                handler.setFormatter(plain)


def _refuse_preload(supervisor: ReplicaSupervisor, error: PreloadError) -> int:
    """Escalates a refused preload as the replica's failure: no worker started."""
    supervisor.refuse_preload(error)
    print(f"replica {supervisor.replica_id}: {error}", file=sys.stderr)
    return EXIT_ESCALATED


def run_replica(config: Any, entrypoint: Union[Callable[..., Any], str], args: Sequence[Any], options: ReplicaOptions) -> int:
    """Runs one replica's workers on this host until they finish.

    ``config`` is a ``torch.distributed.launcher.api.LaunchConfig`` (what
    torchrun builds from its flags); ``entrypoint``/``args`` as torchrun's.
    Returns 0 when the workers succeeded, ``EXIT_ESCALATED`` when the
    supervisor escalated (the failure is in the run directory's
    ``escalation.json``), 1 for any other agent failure.
    """
    from torch.distributed.elastic import events, metrics
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous import registry as rdzv_registry
    from torch.distributed.launcher.api import _get_addr_and_port

    from torch_monarch.supervision.agent import EscalatedFailure, MonarchAgent

    _plain_torch_log_format()
    if not config.run_id:
        config.run_id = str(uuid.uuid4().int)
    run_dir = options.run_dir
    # A fresh rendezvous store for every restart (hosted by worker rank 0)
    # instead of the agent's store shared across restarts. Monarch groups do
    # not need it (they key their rendezvous on TORCHELASTIC_RESTART_COUNT,
    # see torch_monarch/backend.py), but a replica running Gloo inside
    # (DemoConfig.backend) would read the keys its previous incarnation left.
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    os.environ["MONARCH_REPLICA_ID"] = options.replica_id
    os.environ["MONARCH_SUPERVISOR_PID"] = str(os.getpid())
    if run_dir is not None:
        os.environ["MONARCH_RUN_DIR"] = str(run_dir.root)
    os.environ.update(options.env)
    supervisor = ReplicaSupervisor(options.replica_id, options.policy, run_dir, hang=options.hang)
    if config.start_method == "forkserver":
        try:
            server = start_forkserver(options.preload)
        except PreloadError as e:
            return _refuse_preload(supervisor, e)
        supervisor.event(Event.FORKSERVER_READY, pid=server, preload=list(options.preload))

    rdzv_parameters = RendezvousParameters(
        backend=config.rdzv_backend,
        endpoint=config.rdzv_endpoint,
        run_id=config.run_id,
        min_nodes=config.min_nodes,
        max_nodes=config.max_nodes,
        local_addr=config.local_addr,
        **config.rdzv_configs,
    )
    master_addr, master_port = _get_addr_and_port(rdzv_parameters)
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = config.signals_to_handle
    spec = WorkerSpec(
        role=config.role,
        local_world_size=config.nproc_per_node,
        entrypoint=entrypoint,
        args=tuple(args),
        rdzv_handler=rdzv_registry.get_rendezvous_handler(rdzv_parameters),
        # The supervisor's policy limits restarts; the agent's counter only counts them.
        max_restarts=1 << 30,
        monitor_interval=config.monitor_interval,
        master_addr=master_addr,
        master_port=master_port,
        local_addr=config.local_addr,
    )
    agent = MonarchAgent(
        spec,
        config.logs_specs,
        config.start_method,
        supervisor=supervisor,
        stop_timeout=options.stop_timeout,
        log_line_prefix_template=config.log_line_prefix_template,
    )
    metrics.initialize_metrics(metrics.MetricsConfig(config.metrics_cfg))
    try:
        result = agent.run()
    except EscalatedFailure as e:
        supervisor.escalate(e.failure, agent.worker_pids())
        return EXIT_ESCALATED
    finally:
        try:
            spec.rdzv_handler.shutdown()
        except Exception:  # noqa: BLE001 - best effort
            pass
    events.record(agent.get_event_succeeded(), config.event_log_handler)
    if result.is_failed():
        failure = agent.failures[-1] if agent.failures else None
        if failure is not None:
            supervisor.escalate(failure, agent.worker_pids(), SupervisorState.FAILED)
        else:
            agent.publish(SupervisorState.FAILED)
        print(f"replica {options.replica_id}: workers failed: {failure.describe() if failure else result}", file=sys.stderr)
        return 1
    agent.publish(SupervisorState.SUCCEEDED)
    supervisor.event(Event.REPLICA_SUCCEEDED)
    return 0
