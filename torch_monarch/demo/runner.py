"""Runs one phase of the demo: a ``monarch-run`` job for a fixed time.

A phase starts the replicas, waits until all of them train in one quorum
(the measurement window starts then), runs for ``duration`` while the
failure drill (if any) injects failures, then stops the job cleanly: it
waits until every replica is back in the full quorum, asks all workers to
stop at the same step (``control.json``), and waits for them to exit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Optional

from torch_monarch._config import coerce_durations
from torch_monarch.demo.config import DemoConfig
from torch_monarch.demo.device import require_device
from torch_monarch.launch.args import parse_args
from torch_monarch.launch.backends import make_backend, stop_shielded
from torch_monarch.launch.config import job_config
from torch_monarch.launch.inject import FailureInjector, Injection, InjectionSpec
from torch_monarch.launch.status_view import StatusView, all_training, replica_rows
from torch_monarch.quorum.lighthouse import LighthouseConfig
from torch_monarch.quorum.sync import SyncConfig
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.rundir import ControlRecord, RunDir
from torch_monarch.supervision.states import WorkerState

__all__ = ["PhaseResult", "PhaseSpec", "run_phase"]

logger: logging.Logger = logging.getLogger(__name__)

_TRAIN_SCRIPT = str(Path(__file__).with_name("train.py"))


@dataclass
class PhaseSpec:
    """What one phase runs (durations: timedeltas or numbers of seconds)."""

    name: str
    run_dir: Path
    duration: timedelta
    replicas: int = 4
    workers: int = 2
    min_replicas: int = 2
    inject: Optional[InjectionSpec] = None
    status: str = "log"
    config: DemoConfig = field(default_factory=DemoConfig)
    startup_timeout: timedelta = timedelta(minutes=3)
    stop_timeout: timedelta = timedelta(seconds=90)
    env: dict[str, str] = field(default_factory=dict)
    #: the embedded Lighthouse's settings (None: torch_monarch's defaults)
    lighthouse: Optional[LighthouseConfig] = None
    #: further monarch-run flags (they override the ones above)
    extra_args: list[str] = field(default_factory=list)
    #: fork workers from a preloaded forkserver (else new interpreters, like torchrun); on GPUs
    #: too: the server never initialises CUDA, so its children can (supervision/cuda_clean.py)
    preload: bool = True
    #: who supervises the replicas: "embedded" or "monarch" (real Monarch actors)
    orchestrator: str = "embedded"
    #: synchronisation across replicas (monarch-run's --sync/--sync-every)
    sync: SyncConfig = field(default_factory=SyncConfig)

    def __post_init__(self) -> None:
        coerce_durations(self)


@dataclass
class PhaseResult:
    spec: PhaseSpec
    window_start: float = 0.0
    window_end: float = 0.0
    stop_step: Optional[int] = None
    injections: list[Injection] = field(default_factory=list)
    succeeded: bool = False
    message: str = ""
    #: the host's 1-minute load average at the window's start and end (other jobs share the CPUs)
    load_average: list[float] = field(default_factory=list)


def _args(spec: PhaseSpec) -> list[str]:
    preload = ["--preload", "torch_monarch.demo.warmup"] if spec.preload else ["--start-method", "spawn"]
    return [
        "--replicas",
        str(spec.replicas),
        "--nproc-per-node",
        str(spec.workers),
        "--min-replicas",
        str(spec.min_replicas),
        "--max-restarts",
        "10",
        "--restart-backoff",
        "0.5",
        "--hang-timeout",
        "20",
        *preload,
        "--redirects",
        "3",
        "--run-dir",
        str(spec.run_dir),
        "--orchestrator",
        spec.orchestrator,
        "--sync",
        spec.sync.mode,
        "--sync-every",
        str(spec.sync.every),
        *spec.extra_args,
        _TRAIN_SCRIPT,
    ]


def _all_ready(run_dir: RunDir, replica_ids: list[str], workers: int) -> bool:
    for replica_id in replica_ids:
        for rank in range(workers):
            status = run_dir.read_worker(replica_id, rank)
            if status is None or status.state != WorkerState.READY:
                return False
    return True


def run_phase(spec: PhaseSpec) -> PhaseResult:
    """Runs the phase; see the module docstring. ``DeviceUnavailableError`` before anything starts."""
    require_device(spec.config.device)
    if spec.run_dir.exists():
        shutil.rmtree(spec.run_dir)
    spec.run_dir.mkdir(parents=True)
    args = parse_args(_args(spec))
    lighthouse = None
    if spec.lighthouse is not None:
        lighthouse = dataclasses.replace(spec.lighthouse, min_replicas=spec.min_replicas)
    config = job_config(args, lighthouse=lighthouse, env={**spec.config.to_env(), "MONARCH_START_BARRIER": "1", **spec.env})
    job = make_backend(config)
    run_dir, replica_ids = RunDir(config.run_dir), config.replica_ids
    view = StatusView(run_dir, replica_ids, mode=spec.status, title=f"monarch demo: {spec.name}", log_every_s=10.0)
    injector = FailureInjector(run_dir, spec.inject, replica_ids) if spec.inject else None
    result = PhaseResult(spec)
    job.start()
    try:
        # 1. Start-up: every worker of every replica ready, then all start together.
        deadline = time.monotonic() + spec.startup_timeout.total_seconds()
        while not _all_ready(run_dir, replica_ids, spec.workers):
            if not job.poll() or time.monotonic() > deadline:
                result.message = "replicas did not all start"
                return result
            view.refresh(extra="starting replicas")
            time.sleep(0.2)
        run_dir.write_control(ControlRecord(start=True))
        result.window_start = time.time()
        result.load_average.append(os.getloadavg()[0])
        run_dir.event(Event.WINDOW_START, phase=spec.name)
        if injector is not None:
            injector.start()
        # 2. The measured window.
        end = time.monotonic() + spec.duration.total_seconds()
        while time.monotonic() < end:
            if not job.poll():
                result.message = "job ended early"
                break
            if injector is not None:
                injector.tick()
            remaining = end - time.monotonic()
            view.refresh(extra=f"{spec.name}: {remaining:5.0f}s left")
            time.sleep(0.2)
        result.window_end = time.time()
        result.load_average.append(os.getloadavg()[0])
        run_dir.event(Event.WINDOW_END, phase=spec.name)
        if injector is not None:
            result.injections = list(injector.injections)
        # 3. Stop every replica at one step, once all are back in the quorum.
        deadline = time.monotonic() + spec.stop_timeout.total_seconds()
        while not all_training(run_dir, replica_ids) and time.monotonic() < deadline and job.poll():
            view.refresh(extra="waiting for all replicas before stopping")
            time.sleep(0.2)
        steps = [row.step or 0 for row in replica_rows(run_dir, replica_ids)]
        result.stop_step = max(steps) + 5
        run_dir.write_control(ControlRecord(start=True, stop_at_step=result.stop_step))
        run_dir.event(Event.STOP_REQUESTED, step=result.stop_step)
        while job.poll() and time.monotonic() < deadline:
            view.refresh(extra=f"stopping at step {result.stop_step}")
            time.sleep(0.2)
        result.succeeded = job.succeeded
        if not result.succeeded:
            result.message = "replicas did not all finish cleanly"
        return result
    finally:
        stop_shielded(job)
        view.refresh()
        view.close()
