"""TorchFT Manager + Lighthouse over ProcessGroupMonarch, on real processes.

Three replica groups (one process each) train a small model with torchft's
Manager (gradients averaged by Manager.allreduce) and OptimizerWrapper. One replica's process is SIGKILLed mid-run; the
other two keep committing steps; the test then starts the replica again,
which heals from a donor over the process group (PGTransport) and rejoins.
At the end every replica's parameters are identical.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import pytest
import torch
from torchft.coordination import LighthouseServer
from torchft.manager import Manager

from torchft_replica import ReplicaConfig, replica_main

# On both TorchFT generations: 0.2's Manager calls configure(), 0.3's reconfigure().
pytestmark = [pytest.mark.timeout(150), pytest.mark.newest_stack]

REPLICAS = 3
VICTIM = 2
KILL_AFTER_STEP = 3  # the victim is killed once it has committed this step
GATE_STEP = 8  # survivors commit up to here without the victim, then wait for its restart
STOP_STEP = 16
BOUND_S = 120.0


class _Replicas:
    """The replica processes, a pipe to each, and what they reported."""

    def __init__(self, config: ReplicaConfig) -> None:
        self._mp = multiprocessing.get_context("spawn")
        self.config = config
        self.processes: dict[tuple[int, int], multiprocessing.process.BaseProcess] = {}
        self.conns: dict[tuple[int, int], Connection] = {}
        self.steps: dict[tuple[int, int], list[tuple[int, bool, float]]] = {}
        self.ready: dict[tuple[int, int], int] = {}
        self.done: dict[tuple[int, int], tuple[int, list[torch.Tensor]]] = {}
        self.deadline = time.monotonic() + BOUND_S

    def start(self, replica: int, life: int) -> None:
        ours, theirs = self._mp.Pipe(duplex=True)
        process = self._mp.Process(
            target=replica_main,
            args=(replica, life, self.config, theirs),
            name=f"replica{replica}.{life}",
            daemon=True,
        )
        process.start()
        theirs.close()
        self.processes[(replica, life)] = process
        self.conns[(replica, life)] = ours
        self.steps[(replica, life)] = []

    def send(self, message: str) -> None:
        """Sends ``message`` to every replica process still running."""
        for key, conn in list(self.conns.items()):
            try:
                conn.send(message)
            except (BrokenPipeError, ConnectionResetError):
                del self.conns[key]

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        """Reads events until ``condition()`` holds; fails on a replica error or the bound."""
        while not condition():
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or not self.conns:
                raise AssertionError(f"timed out waiting for {what}; committed steps so far: {self.summary()}")
            by_conn = {id(conn): key for key, conn in self.conns.items()}
            for conn in wait(list(self.conns.values()), timeout=remaining):
                key = by_conn[id(conn)]
                try:
                    self._record(key, conn.recv())
                except (EOFError, OSError):  # the process is gone (killed, or exited)
                    del self.conns[key]

    def _record(self, key: tuple[int, int], event: tuple[Any, ...]) -> None:
        kind = event[0]
        if kind == "ready":
            self.ready[key] = event[3]
        elif kind == "step":
            self.steps[key].append((event[3], event[4], event[5]))
        elif kind == "done":
            self.done[key] = (event[3], [torch.tensor(p) for p in event[4]])
        elif kind == "error":
            raise AssertionError(f"replica {key[0]} (life {key[1]}) failed:\n{event[3]}")

    def committed(self, replica: int, life: int) -> list[int]:
        return [step for step, committed, _ in self.steps[(replica, life)] if committed]

    def last_step(self, replica: int, life: int) -> int:
        steps = self.committed(replica, life)
        return steps[-1] if steps else 0

    def summary(self) -> dict[str, Any]:
        return {f"{r}.{l}": self.committed(r, l)[-5:] for (r, l) in self.steps}

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.exitcode is None:
                process.kill()
        for process in self.processes.values():
            process.join(10)
        for conn in self.conns.values():
            conn.close()


def test_manager_survives_replica_kill_and_heals_restarted_replica() -> None:
    kill_and_heal(native=False)


@pytest.mark.newest_stack
@pytest.mark.skipif(
    not hasattr(torch.distributed, "_reconfigure"),
    reason=f"native c10d reconfigure needs torch >= 2.14 (this is {torch.__version__})",
)
@pytest.mark.skipif(
    not hasattr(Manager, "_reconfigure_pg"), reason="a native group as Manager(pg=...) needs torchft 0.3 / nightly"
)
def test_manager_with_a_native_monarch_group_survives_kill_and_heals() -> None:
    kill_and_heal(native=True)


def kill_and_heal(native: bool) -> None:
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=500, heartbeat_timeout_ms=1000)
    config = ReplicaConfig(lighthouse=lighthouse.address(), stop_step=STOP_STEP, gate_step=GATE_STEP, native=native)
    replicas = _Replicas(config)
    survivors = [r for r in range(REPLICAS) if r != VICTIM]
    try:
        for replica in range(REPLICAS):
            replicas.start(replica, life=0)
        replicas.wait_for("the replicas to start", lambda: len(replicas.ready) == REPLICAS)
        replicas.send("start")

        replicas.wait_for("the victim's step", lambda: replicas.last_step(VICTIM, 0) >= KILL_AFTER_STEP)
        os.kill(replicas.processes[(VICTIM, 0)].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        replicas.processes[(VICTIM, 0)].join(10)
        assert replicas.processes[(VICTIM, 0)].exitcode == -signal.SIGKILL
        step_at_kill = max(replicas.last_step(r, 0) for r in survivors)

        # The survivors keep committing without it, up to the gate.
        replicas.wait_for("survivors at the gate", lambda: all(replicas.last_step(r, 0) >= GATE_STEP for r in survivors))
        for r in survivors:
            after_kill = [step for step, committed, t in replicas.steps[(r, 0)] if committed and t > killed_at]
            assert len(after_kill) >= GATE_STEP - step_at_kill - 1, (r, after_kill, replicas.summary())
            assert after_kill[-1] >= GATE_STEP

        # The restarted replica starts from scratch, heals from a donor and rejoins.
        replicas.start(VICTIM, life=1)
        replicas.wait_for("the restarted replica to start", lambda: (VICTIM, 1) in replicas.ready)
        replicas.send("start")  # the survivors ignore a second "start"
        replicas.send("gate")
        replicas.wait_for(
            "all replicas to finish", lambda: all((r, 0) in replicas.done for r in survivors) and (VICTIM, 1) in replicas.done
        )

        first_step = replicas.committed(VICTIM, 1)[0]
        # It began at step 0; its first commit comes after the survivors' steps, so it healed.
        assert first_step > GATE_STEP, replicas.summary()
        finals = {r: replicas.done[(r, 0)] for r in survivors}
        finals[VICTIM] = replicas.done[(VICTIM, 1)]
        for replica, (step, params) in finals.items():
            assert step == STOP_STEP, (replica, step)
            for mine, reference in zip(params, finals[survivors[0]][1]):
                torch.testing.assert_close(mine, reference, rtol=0, atol=0)
        # Training moved the weights away from the shared initial values.
        torch.manual_seed(42)
        initial = torch.nn.Linear(8, 16).weight
        assert not torch.equal(finals[VICTIM][1][0], initial)
    finally:
        replicas.stop_all()
        lighthouse.shutdown()
