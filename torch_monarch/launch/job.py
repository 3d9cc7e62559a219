"""Orchestrator mode of ``monarch-run``: a job of ``--replicas`` replica groups.

:func:`run_job` is the command's loop over the job backend that
``--orchestrator`` names (:mod:`torch_monarch.launch.backends`): print its
plan (``--dryrun``), or start it and supervise, inject drills, refresh the
status view, until the job ends or is interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Optional

from torch_monarch.launch.backends import make_backend, stop_shielded
from torch_monarch.launch.config import job_config
from torch_monarch.launch.inject import FailureInjector, InjectionSpec
from torch_monarch.launch.status_view import StatusView, all_training
from torch_monarch.supervision.rundir import RunDir

__all__ = ["run_job"]


def run_job(args: argparse.Namespace) -> int:
    """``monarch-run`` with replica groups: returns the process exit code."""
    config = job_config(args)
    job = make_backend(config)
    if args.dryrun:
        print(job.dryrun())
        return 0
    run_dir = RunDir(config.run_dir)
    mode = args.status or ("live" if sys.stdout.isatty() else "log")
    view = StatusView(run_dir, config.replica_ids, mode=mode)
    injector = None
    if args.inject_failures:
        injector = FailureInjector(run_dir, InjectionSpec.parse(args.inject_failures), config.replica_ids)
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    print(f"monarch-run: run dir {run_dir.root}", file=sys.stderr, flush=True)
    try:
        job.start()
        print(f"monarch-run: lighthouse {job.lighthouse_address}", file=sys.stderr, flush=True)
        while not stop.is_set() and job.poll():
            if injector is not None:
                if not injector.started and all_training(run_dir, config.replica_ids):
                    injector.start()  # drills start once the whole job trains
                injector.tick()
            view.refresh(extra=f"lighthouse {job.lighthouse_address}")
            stop.wait(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stop_shielded(job)
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
