"""Orchestrator mode of ``monarch-run``: a job of ``--replicas`` replica groups.

:class:`Job` starts the quorum service (an embedded TorchFT Lighthouse
unless ``--lighthouse`` names one), submits one replica agent per replica
through the scheduler and supervises them with the :class:`Orchestrator`.
:func:`run_job` is the command's loop: supervise, inject drills, refresh the
status view, until the job ends or is interrupted.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Any, Optional

from torch_monarch.launch.inject import FailureInjector, InjectionSpec
from torch_monarch.launch.replica_main import replica_args
from torch_monarch.launch.status_view import StatusView
from torch_monarch.quorum.lighthouse import EmbeddedLighthouse, LighthouseConfig
from torch_monarch.supervision.failure import Failure
from torch_monarch.supervision.orchestrator import Orchestrator
from torch_monarch.supervision.policy import replacement_policy
from torch_monarch.supervision.rundir import RunDir
from torch_monarch.supervision.scheduler.base import ReplicaSpec, Scheduler
from torch_monarch.supervision.scheduler.local import LocalScheduler

__all__ = ["Job", "make_job", "run_job"]

logger: logging.Logger = logging.getLogger(__name__)


def _scheduler_cfg(text: str) -> dict[str, str]:
    cfg = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = item.partition("=")
        cfg[key.strip()] = value.strip()
    return cfg


def _nproc(args: argparse.Namespace) -> int:
    from torch.distributed.run import determine_local_world_size

    return determine_local_world_size(args.nproc_per_node)


def _nnodes(args: argparse.Namespace) -> int:
    from torch.distributed.run import parse_min_max_nnodes

    return parse_min_max_nnodes(args.nnodes)[1]


class Job:
    """One multi-replica job; see the module docstring.

    Args:
        args: parsed ``monarch-run`` arguments.
        lighthouse: settings of the embedded Lighthouse (default: the
            ``MONARCH_LIGHTHOUSE_*`` environment with ``--min-replicas``).
        env: extra environment for every replica.
        scheduler: overrides ``--scheduler``.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        *,
        lighthouse: Optional[LighthouseConfig] = None,
        env: Optional[dict[str, str]] = None,
        scheduler: Optional[Scheduler] = None,
    ) -> None:
        self.args = args
        self.run_dir = RunDir(args.run_dir or tempfile.mkdtemp(prefix="monarch-run-"))
        self.run_dir.root.mkdir(parents=True, exist_ok=True)
        self.lighthouse_config = lighthouse or LighthouseConfig(min_replicas=args.min_replicas).with_env_overrides()
        self.env = dict(env or {})
        self.replica_ids = [str(i) for i in range(args.replicas)]
        self.scheduler: Scheduler = scheduler or self._make_scheduler()
        self.lighthouse: Optional[EmbeddedLighthouse] = None
        self.lighthouse_address: str = args.lighthouse
        self.orchestrator: Optional[Orchestrator] = None
        self.started_at: Optional[float] = None

    def _make_scheduler(self) -> Scheduler:
        if self.args.scheduler == "local":
            return LocalScheduler(self.run_dir)
        from torch_monarch.supervision.scheduler.torchx import TorchXScheduler

        return TorchXScheduler(self.args.scheduler, _scheduler_cfg(self.args.scheduler_cfg), run_dir=self.run_dir)

    def replica_specs(self) -> list[ReplicaSpec]:
        address = self.lighthouse_address or "http://localhost:29510"
        return [
            ReplicaSpec(
                replica_id=rid,
                args=replica_args(self.args, rid, address, self.run_dir),
                env=dict(self.env),
                nnodes=_nnodes(self.args),
                nproc_per_node=_nproc(self.args),
                image=self.args.image,
            )
            for rid in self.replica_ids
        ]

    def start(self) -> None:
        if not self.lighthouse_address:
            self.lighthouse = EmbeddedLighthouse(self.lighthouse_config)
            self.lighthouse_address = self.lighthouse.address
        self.run_dir.event(
            "job_started",
            replicas=len(self.replica_ids),
            lighthouse=self.lighthouse_address,
            orchestrator="embedded",
            scheduler=self.scheduler.name,
        )
        self.orchestrator = Orchestrator(
            self.scheduler,
            self.replica_specs(),
            min_replicas=self.args.min_replicas,
            replace_policy=replacement_policy(self.args.replace_replicas),
            run_dir=self.run_dir,
        )
        self.started_at = time.monotonic()
        self.orchestrator.start()

    def poll(self) -> bool:
        assert self.orchestrator is not None, "start() first"
        return self.orchestrator.poll()

    def all_training(self) -> bool:
        """True once every replica's workers train in one quorum of all replicas."""
        from torch_monarch.launch.status_view import replica_rows

        rows = replica_rows(self.run_dir, self.replica_ids)
        return all(
            row.state == "training" and row.quorum_id is not None and row.participants == len(self.replica_ids)
            for row in rows
        )

    @property
    def succeeded(self) -> bool:
        return self.orchestrator is not None and self.orchestrator.succeeded

    @property
    def fatal(self) -> Optional[Failure]:
        """The failure that ended the job, if one did."""
        return self.orchestrator.fatal if self.orchestrator is not None else None

    @property
    def failure_message(self) -> Optional[str]:
        """Why the job ended without a replica failure to show (the Monarch orchestrator only)."""
        return None

    def stop(self) -> None:
        # Stopping must not be cut short by a second Ctrl-C (replicas would be left behind).
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
        try:
            self._stop()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _stop(self) -> None:
        if self.orchestrator is not None:
            self.orchestrator.stop()
        else:
            self.scheduler.close()
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
            self.lighthouse = None
        self.run_dir.event("job_stopped", succeeded=self.succeeded)

    def __enter__(self) -> "Job":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def make_job(args: argparse.Namespace, **kwargs: Any) -> Job:
    """The job of ``args.orchestrator``: embedded (default) or monarch (real Monarch actors)."""
    if getattr(args, "orchestrator", "embedded") == "monarch":
        from torch_monarch.monarch._require import require_monarch

        require_monarch()
        from torch_monarch.monarch.job import MonarchJob

        return MonarchJob(args, **kwargs)
    return Job(args, **kwargs)


def run_job(args: argparse.Namespace) -> int:
    """``monarch-run`` with replica groups: returns the process exit code."""
    job = make_job(args)
    if args.dryrun:
        for spec in job.replica_specs():
            print(f"# replica {spec.replica_id} ({job.scheduler.name})")
            print(job.scheduler.dryrun(spec))
        return 0
    mode = args.status or ("live" if sys.stdout.isatty() else "log")
    view = StatusView(job.run_dir, job.replica_ids, mode=mode)
    injector = None
    if args.inject_failures:
        injector = FailureInjector(job.run_dir, InjectionSpec.parse(args.inject_failures), job.replica_ids)
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"monarch-run: run dir {job.run_dir.root}", file=sys.stderr, flush=True)
    try:
        job.start()
        print(f"monarch-run: lighthouse {job.lighthouse_address}", file=sys.stderr, flush=True)
        while not stop.is_set() and job.poll():
            if injector is not None:
                if not injector.started and job.all_training():
                    injector.start()  # drills start once the whole job trains
                injector.tick()
            view.refresh(extra=f"lighthouse {job.lighthouse_address}")
            stop.wait(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        job.stop()
        view.refresh()
        view.close()
    if stop.is_set():
        print("monarch-run: interrupted", file=sys.stderr)
        return 130
    fatal = job.fatal
    if fatal is not None:
        print(f"monarch-run: job failed: {fatal.describe()}", file=sys.stderr)
        if fatal.traceback:
            print(fatal.traceback, file=sys.stderr)
        return 1
    if job.failure_message:
        print(f"monarch-run: job failed: {job.failure_message}", file=sys.stderr)
    return 0 if job.succeeded else 1
