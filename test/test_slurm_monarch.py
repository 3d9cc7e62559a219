"""``monarch-run --orchestrator monarch --scheduler slurm``: the Monarch orchestrator on a SLURM allocation.

torchmonarch 0.7.0's ``SlurmJob`` allocates one node of the test cluster
(``test/support/slurm_cluster.py``) and starts a Monarch worker on it; the
OrchestrationManager, the Lighthouse, the ReplicaActors and their trainers
are spawned on that allocation's hosts, not on the client's ``this_host()``.
The drills: a killed trainer restarts in place; with no restarts left, the
replica escalates and the OrchestrationManager replaces it (a new
ReplicaActor on the allocation). Each ends with identical final parameters,
the allocation cancelled and no job process left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("monarch.actor")
pytest.importorskip("torchft")

from slurm_cluster import SlurmCluster, slurm_cluster  # noqa: E402,F401 - the fixture
from slurm_drill import (  # noqa: E402,F401 - drill_run is a fixture
    BOUND_S,
    DrillRun,
    assert_identical_finals,
    assert_nothing_left,
    assert_survivor_kept_training,
    drill_run,
)

KILL = ("--inject-failures", "every=2s,kinds=kill,count=1,seed=0")


def _monarch(cluster: SlurmCluster) -> tuple[str, ...]:
    # SlurmJob dials its workers by node name: the node named after this machine.
    return ("--orchestrator", "monarch", "--scheduler-cfg", f"nodelist={cluster.nodes[0]}")


def _slurm_job_of(pid: int) -> str:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    found = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURM_JOB_ID=")]
    return found[0] if found else ""


def _assert_runs_in_the_allocation(job: DrillRun) -> str:
    """The OrchestrationManager and the trainers are processes of the SLURM job; returns its id."""
    events = job.events()
    (allocation,) = [e for e in events if e["event"] == "allocation_started"]
    manager = next(e["pid"] for e in events if e["event"] == "orchestration_started")
    trainers = [p for e in events if e["event"] == "workers_started" for p in e["pids"]]
    assert _slurm_job_of(manager) == allocation["job_id"], (manager, allocation)
    live = [p for p in trainers if Path(f"/proc/{p}").exists()]
    assert live and all(_slurm_job_of(p) == allocation["job_id"] for p in live), (live, allocation)
    return str(allocation["job_id"])


def _assert_allocation_ended(cluster: SlurmCluster, job_id: str) -> None:
    (row,) = [r for r in cluster.accounting(job_id) if r["id"] == job_id]
    assert row["state"].split()[0] == "CANCELLED", row  # the client cancels its allocation at the end
    assert_nothing_left(cluster)


def _after(events: list[dict[str, Any]], replica: str, t: float) -> list[str]:
    return [e["event"] for e in events if e["t"] >= t and str(e.get("replica")) == replica]


@pytest.mark.timeout(BOUND_S + 30)
def test_killed_trainer_restarts_in_place_on_the_allocation(
    slurm_cluster: SlurmCluster, drill_run: Callable[..., DrillRun]
) -> None:
    job = drill_run(*_monarch(slurm_cluster), *KILL)
    job.wait_for(lambda: any(e["event"] == "inject" for e in job.events()), "injected kill")
    (inject,) = [e for e in job.events() if e["event"] == "inject"]
    victim = inject["replica"]
    job.wait_for(lambda: job.rejoined_after(victim, inject["t"]), f"replica {victim} back in the quorum")
    allocation = _assert_runs_in_the_allocation(job)
    job.stop_and_finish()
    events = job.events()
    for name in ("detected", "restart_scheduled", "workers_started", "healed", "rejoined"):
        assert name in _after(events, victim, inject["t"]), _after(events, victim, inject["t"])
    assert not any(e["event"] == "replica_replacing" for e in events)
    assert_survivor_kept_training(job.run_dir, events, victim, inject["t"])
    assert_identical_finals(job.run_dir)
    _assert_allocation_ended(slurm_cluster, allocation)


@pytest.mark.timeout(BOUND_S + 30)
def test_escalated_replica_is_replaced_on_the_allocation(
    slurm_cluster: SlurmCluster, drill_run: Callable[..., DrillRun]
) -> None:
    job = drill_run(*_monarch(slurm_cluster), "--max-restarts", "0", "--replace-replicas", "1", *KILL)
    job.wait_for(lambda: any(e["event"] == "replica_replacing" for e in job.events()), "a replacement")
    (replacing,) = [e for e in job.events() if e["event"] == "replica_replacing"]
    victim = replacing["replica"]
    job.wait_for(lambda: job.rejoined_after(victim, replacing["t"]), "the replacement in the quorum")
    allocation = _assert_runs_in_the_allocation(job)
    job.stop_and_finish()
    events = job.events()
    # The ReplicaActor escalated the SIGKILL; the OrchestrationManager replaced it on the same allocation.
    assert replacing["kind"] == "signal", replacing
    assert ("escalated", victim) in [(e["event"], e.get("replica")) for e in events]
    assert not any(e["event"] == "restart_scheduled" for e in events)
    assert "healed" in _after(events, victim, replacing["t"])
    assert_survivor_kept_training(job.run_dir, events, victim, replacing["t"])
    assert_identical_finals(job.run_dir)
    _assert_allocation_ended(slurm_cluster, allocation)
