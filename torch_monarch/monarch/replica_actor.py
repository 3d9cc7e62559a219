"""ReplicaActor: spawns one replica's trainer mesh and supervises it.

Monarch reports a dead trainer process to the actor that owns its mesh, in
``__supervise__``; Monarch itself never restarts anything. The ReplicaActor
turns that report into a :class:`~torch_monarch.supervision.Failure` (the
signal of a kill or segfault, the traceback the trainer reported with
``report_training_error``, a hang its probe found) and asks the project's
:class:`~torch_monarch.supervision.ReplicaSupervisor` (the same
:class:`RestartPolicy`: max restarts in a window, backoff) whether to
restart:

* yes: the broken mesh is stopped and a standby mesh takes its place as
  the next attempt (a new standby is prepared in the background);
  ``__supervise__`` returns True;
* no: the failure goes to ``escalation.json`` and ``__supervise__`` returns
  False, so Monarch escalates it to the OrchestrationManager.

The other replicas are not involved: TorchFT's quorum drops this one and
the restarted trainers heal from a donor when they rejoin.

Every trainer proc is forked from the replica's
:class:`~torch_monarch.monarch.forkserver.ProcForkserver`, which imported
torch (and the trainer's ``preload`` modules) once: no mesh, first or
restarted, pays for that import again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from monarch.actor import Actor, MeshFailure, endpoint, this_host
from monarch.spmd import setup_torch_elastic_env_async

from torch_monarch.monarch.messages import ReplicaConfig
from torch_monarch.monarch.mesh_failure import crashed_ranks, exit_text, trainer_failure
from torch_monarch.monarch.forkserver import ProcForkserver
from torch_monarch.monarch.handles import ActorMesh, ProcMesh
from torch_monarch.monarch.trainer import TrainerActor
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.failure import Failure, root_cause
from torch_monarch.supervision.preload import PreloadError
from torch_monarch.supervision.probes import process_state
from torch_monarch.supervision.replica_supervisor import ReplicaSupervisor, kill_worker
from torch_monarch.supervision.rundir import RunDir, read_json
from torch_monarch.supervision.states import ACTIVE_WORKER_STATES, SupervisorState, WorkerState

__all__ = ["ReplicaActor"]

logger: logging.Logger = logging.getLogger(__name__)

_PROBE_INTERVAL_S = 0.1
#: longest a standby waits for the running attempt to train (a script that never reports progress)
_STANDBY_WAIT_S = 60.0
#: how long stopping waits for a standby mesh still starting (to stop it too)
_STANDBY_STOP_WAIT_S = 120.0
#: how long a vanished trainer may wait for Monarch's report before the probe handles it
_EXIT_GRACE_S = 0.3
#: trainer states after which a standby may be prepared
_UP_STATES = ACTIVE_WORKER_STATES | {WorkerState.READY}
#: replica states in which a trainer mesh is running or about to
_LIVE_STATES = (SupervisorState.PENDING, SupervisorState.RUNNING, SupervisorState.RESTARTING)


@dataclass
class _Attempt:
    """One trainer mesh: the running attempt or the standby for the next."""

    attempt: int
    name: str
    procs: ProcMesh
    trainers: ActorMesh
    pids: list[int]


def _zombie_exit_text(pid: int) -> str:
    """A zombie's exit status (``/proc/<pid>/stat`` field 52) in Monarch's words, or ""."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        status = int(fields[-1])
    except (OSError, IndexError, ValueError):
        return ""
    return exit_text(status)


class ReplicaActor(Actor):
    """Supervises one replica's trainer mesh; see the module docstring."""

    def __init__(self, config: ReplicaConfig) -> None:
        self.config = config
        self.replica_id = config.replica_id
        self.run_dir = RunDir(config.job.run_dir)
        self.supervisor = ReplicaSupervisor(
            config.replica_id, config.job.policy, self.run_dir, hang=config.job.hang, orchestrator="monarch"
        )
        self.active: Optional[_Attempt] = None
        self.state = SupervisorState.PENDING
        self._standby: Optional["asyncio.Future[_Attempt]"] = None
        self._handled: set[int] = set()
        self._stopping: list["asyncio.Future[Any]"] = []
        self._finished: Optional[asyncio.Event] = None
        self._meshes = 0
        self._gone_since: dict[int, float] = {}
        self._zombie_text: dict[int, str] = {}
        self._forkserver = ProcForkserver(config.job.trainer.standby_imports, env=config.job.worker_env())

    # -- meshes -----------------------------------------------------------

    async def _spawn(self, attempt: int) -> _Attempt:
        self._meshes += 1  # a unique name: failures of retired meshes are told apart by it
        name = f"trainers_r{self.replica_id}_m{self._meshes}"
        procs = this_host().spawn_procs(
            per_host={"procs": self.config.job.trainer.nproc}, name=name, bootstrap_command=self._forkserver.bootstrap_command()
        )
        trainers = procs.spawn(name, TrainerActor)
        pids = await trainers.preload.call(list(self.config.job.trainer.standby_imports))
        ready = _Attempt(attempt, name, procs, trainers, [pids.get(r) for r in range(self.config.job.trainer.nproc)])
        self.supervisor.event(Event.STANDBY_READY, attempt=attempt, pids=ready.pids)
        return ready

    async def _spawn_when_training(self, running: _Attempt) -> _Attempt:
        """The standby for the attempt after ``running``, spawned once ``running`` is up.

        Starting procs takes CPU (Monarch's proc bootstrap); doing it while
        the new attempt starts and heals would slow its rejoin, so it waits
        until the running trainers are ready (at the demo's start barrier)
        or train.
        A failure of ``running`` ends the wait at once.
        """
        deadline = time.monotonic() + _STANDBY_WAIT_S
        while self.active is running and self.state == SupervisorState.RUNNING and time.monotonic() < deadline:
            statuses = [self.run_dir.read_worker(self.replica_id, r) for r in range(len(running.pids))]
            if all(st is not None and st.pid == pid and st.state in _UP_STATES for st, pid in zip(statuses, running.pids)):
                break
            await asyncio.sleep(_PROBE_INTERVAL_S)
        if self.state not in (SupervisorState.RUNNING, SupervisorState.RESTARTING):
            raise RuntimeError(f"replica {self.replica_id} is {self.state.value}: no standby needed")
        return await self._spawn(running.attempt + 1)

    async def _next_mesh(self, attempt: int) -> _Attempt:
        standby, self._standby = self._standby, None
        if standby is not None:
            try:
                mesh = await standby
                mesh.attempt = attempt
                return mesh
            except Exception as e:  # noqa: BLE001 - a standby that failed to start is replaced
                logger.warning("replica %s: standby mesh failed (%s); spawning a new one", self.replica_id, e)
        return await self._spawn(attempt)

    def _env(self, attempt: int) -> dict[str, str]:
        return {
            **self.config.job.worker_env(),
            "MONARCH_REPLICA_ID": self.replica_id,
            "REPLICA_GROUP_ID": self.replica_id,
            "NUM_REPLICA_GROUPS": str(self.config.job.replicas),
            "MONARCH_RUN_DIR": self.config.job.run_dir,
            "TORCHFT_LIGHTHOUSE": self.config.lighthouse,
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
        }

    def _log_dir(self, attempt: int) -> Path:
        return self.run_dir.logs_dir(self.replica_id) / f"attempt_{attempt}"

    async def _activate(self, mesh: _Attempt) -> None:
        await setup_torch_elastic_env_async(mesh.procs)
        self.active = mesh
        self.state = SupervisorState.RUNNING
        self.supervisor.start_attempt()
        self._publish(SupervisorState.RUNNING)
        self.supervisor.event(Event.WORKERS_STARTED, attempt=mesh.attempt, pids=mesh.pids)
        if self._standby is None:
            self._standby = asyncio.ensure_future(self._spawn_when_training(mesh))
        asyncio.ensure_future(self._run(mesh))

    async def _run(self, mesh: _Attempt) -> None:
        try:
            await mesh.trainers.run.call(self.config.job.trainer, self._env(mesh.attempt), str(self._log_dir(mesh.attempt)))
        except Exception:  # noqa: BLE001 - a failed trainer is handled by __supervise__
            return
        if self.active is mesh and self.state == SupervisorState.RUNNING:
            self.state = SupervisorState.SUCCEEDED
            self._publish(SupervisorState.SUCCEEDED)
            self.supervisor.event(Event.REPLICA_SUCCEEDED)
            self._done()

    def _retire(self, mesh: _Attempt) -> None:
        for pid in mesh.pids:
            kill_worker(pid)  # they are in a broken group anyway
        self._stopping.append(asyncio.ensure_future(mesh.procs.stop()))

    async def _retire_all(self) -> None:
        """Stops the running and the standby mesh, and waits until they are gone."""
        if self.active is not None:
            self._retire(self.active)
        standby, self._standby = self._standby, None
        if standby is not None:
            try:
                self._retire(await asyncio.wait_for(standby, timeout=_STANDBY_STOP_WAIT_S))
            except Exception:  # noqa: BLE001 - a standby that never started has nothing to stop
                pass
        await asyncio.gather(*self._stopping, return_exceptions=True)
        self._forkserver.stop()

    def _done(self) -> None:
        if self._finished is not None:
            self._finished.set()

    def _workers(self) -> dict[int, int]:
        """Rank → pid of the running attempt."""
        return dict(enumerate(self.active.pids)) if self.active is not None else {}

    def _publish(self, state: SupervisorState, **fields: Any) -> None:
        self.supervisor.publish(state, self._workers(), **fields)

    # -- hang probe -------------------------------------------------------

    def _exit_text(self, pid: int) -> str:
        """How trainer ``pid`` ended, in Monarch's words ("" while it runs): the forkserver's record, or its zombie's."""
        return self._forkserver.exit_text(pid) or self._zombie_text.get(pid, "")

    async def _check_exited(self, mesh: _Attempt) -> None:
        """Backstop for Monarch's report of a dead trainer.

        While this host spawns other procs (e.g. standby meshes on a loaded
        machine), Monarch 0.7 can report a dead proc seconds late (a state
        query times out after 30 s). A trainer gone for ``_EXIT_GRACE_S``
        without a ``__supervise__`` is handled here, with its exit status
        as :meth:`_exit_text` finds it.
        """
        now = time.monotonic()
        for rank, pid in enumerate(mesh.pids):
            state = process_state(pid)
            if state not in (None, "Z"):
                continue
            if state == "Z" and pid not in self._zombie_text:
                self._zombie_text[pid] = _zombie_exit_text(pid)
            since = self._gone_since.setdefault(pid, now)
            if now - since >= _EXIT_GRACE_S:
                reason = self._exit_text(pid) or "its exit status was not observed"
                text = f"crashed_ranks=[{rank}]: trainer process {pid} is gone ({reason}); found by the ReplicaActor's probe"
                await self._trainer_failed(mesh, text, source="probe")
                return

    async def _probe_loop(self) -> None:
        while self.state in _LIVE_STATES:
            mesh = self.active
            if mesh is not None and self.state == SupervisorState.RUNNING:
                await self._check_exited(mesh)
            if mesh is not None and self.state == SupervisorState.RUNNING:
                self.supervisor.kill_hung(dict(enumerate(mesh.pids)))
            await asyncio.sleep(_PROBE_INTERVAL_S)

    # -- endpoints --------------------------------------------------------

    @endpoint
    async def run(self) -> str:
        """Starts the first attempt and returns when the replica has finished ("succeeded")."""
        self._finished = asyncio.Event()
        asyncio.ensure_future(self._probe_loop())
        try:
            await self._forkserver.start()
        except PreloadError as e:
            # As under the embedded orchestrator: the replica escalates, no trainer starts.
            self.state = SupervisorState.FAILED
            self.supervisor.refuse_preload(e)
            return self.state.value
        self.supervisor.event(Event.FORKSERVER_READY, pid=self._forkserver.pid)
        first, standby = await asyncio.gather(self._spawn(0), self._spawn(1))
        self._standby = asyncio.get_running_loop().create_future()
        self._standby.set_result(standby)
        await self._activate(first)
        await self._finished.wait()
        return self.state.value

    @endpoint
    async def shutdown(self) -> None:
        """Stops every trainer (running and standby)."""
        self.state = SupervisorState.CANCELLED
        await self._retire_all()
        self._done()

    # -- supervision ------------------------------------------------------

    def _failure(self, mesh: _Attempt, text: str) -> Failure:
        now = time.time()
        ranks = crashed_ranks(text) or [0]
        logs = self._log_dir(mesh.attempt)
        failures = [
            trainer_failure(self.supervisor, text, rank=r, pid=mesh.pids[r], log_dir=logs / str(r), detected_at=now)
            for r in ranks
        ]
        # Peers that ended too: the crash itself when Monarch reported the peer
        # it broke first, or a collective error the crash caused.
        for r in range(len(mesh.pids)):
            if r in ranks:
                continue
            ended = self._exit_text(mesh.pids[r])
            if ended or read_json(logs / str(r) / "error.json") is not None:
                failures.append(
                    trainer_failure(
                        self.supervisor,
                        ended or "exited with non-zero code 1",
                        rank=r,
                        pid=mesh.pids[r],
                        log_dir=logs / str(r),
                        detected_at=now,
                    )
                )
        return root_cause(failures)

    async def __supervise__(self, failure: MeshFailure) -> bool:
        mesh = self.active
        if mesh is None or failure.mesh_name.rsplit("-", 1)[0] != mesh.name:
            # Monarch's own meshes (logger, SPMD setup) and meshes already retired.
            return True
        return await self._trainer_failed(mesh, str(failure), source="monarch")

    async def _trainer_failed(self, mesh: _Attempt, text: str, source: str) -> bool:
        """Restarts ``mesh`` under the policy (True) or escalates (False); ``text`` is Monarch's report."""
        if mesh.attempt in self._handled or self.state != SupervisorState.RUNNING:
            return True  # another rank of a failure being handled
        self._handled.add(mesh.attempt)
        cause = self._failure(mesh, text)
        self.supervisor.detected(cause, orchestrator="monarch", source=source, monarch=text[-2000:])
        if self.supervisor.supervise(cause):
            self.state = SupervisorState.RESTARTING
            self._publish(SupervisorState.RESTARTING, failure=cause, delay_s=self.supervisor.last_delay)
            asyncio.ensure_future(self._restart(mesh, self.supervisor.last_delay))
            return True
        self.state = SupervisorState.FAILED
        self.supervisor.escalate(cause, self._workers())
        await self._retire_all()
        self._done()
        return False

    async def _restart(self, old: _Attempt, delay: float) -> None:
        self._retire(old)
        if delay > 0:
            await asyncio.sleep(delay)  # the restart policy's backoff
        mesh = await self._next_mesh(old.attempt + 1)
        if self.state != SupervisorState.RESTARTING:  # stopped meanwhile
            self._retire(mesh)
            return
        await self._activate(mesh)
