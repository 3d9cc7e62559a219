"""``monarch-run --scheduler slurm`` on a live SLURM cluster, through TorchX 0.7.0's SLURM scheduler.

The cluster (``test/support/slurm_cluster.py``) runs on this machine: three
``slurmd`` nodes on loopback. Two replicas of the demo's trainer run as two
SLURM jobs; the drills:

* a worker is killed: its replica restarts it in place (same SLURM job),
  the other replica keeps training, the restarted one heals and rejoins;
* a worker is killed with no restarts left: the replica escalates and the
  orchestrator replaces it with a new SLURM job, which heals and rejoins;
* a replica's job is cancelled (``scancel``): the orchestrator sees it and
  replaces it with a new SLURM job.

Each waits for the recovery, then stops both replicas at the same step: their
final parameters are identical, and no SLURM job or job process is left.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

pytest.importorskip("torchx")

from slurm_cluster import SlurmCluster, slurm_cluster  # noqa: E402,F401 - the fixture
from slurm_drill import (  # noqa: E402,F401 - drill_run is a fixture
    BOUND_S,
    DrillRun,
    assert_identical_finals,
    assert_nothing_left,
    assert_survivor_kept_training,
    drill_run,
)


def _jobs(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each replica's SLURM job ids, in submission order."""
    jobs: dict[str, list[str]] = {}
    for e in events:
        if e["event"] == "replica_submitted":
            assert e["scheduler"] == "slurm" and e["handle"].startswith("slurm://"), e
            jobs.setdefault(e["replica"], []).append(e["handle"].rsplit("/", 1)[1])
    return jobs


def _assert_replaced_and_healed(
    cluster: SlurmCluster, run_dir: Path, events: list[dict[str, Any]], victim: str, first_state: str, kind: str
) -> None:
    jobs = _jobs(events)
    other = "1" if victim == "0" else "0"
    assert len(jobs[victim]) == 2 and len(jobs[other]) == 1, jobs
    first, replacement = (cluster.accounting(j)[0] for j in jobs[victim])
    # The replaced allocation ended as SLURM says; the replacement is a new SLURM job that ran to the end.
    assert first["state"].split()[0] == first_state, first
    assert replacement["state"] == "COMPLETED" and cluster.accounting(jobs[other][0])[0]["state"] == "COMPLETED"
    (replacing,) = [e for e in events if e["event"] == "replica_replacing"]
    assert replacing["replica"] == victim and replacing["kind"] == kind, replacing
    healed = [e for e in events if e["event"] == "healed" and e["replica"] == victim and e["t"] > replacing["t"]]
    assert healed, "the replacement never healed from the survivor"
    assert_survivor_kept_training(run_dir, events, victim, replacing["t"])


@pytest.mark.timeout(BOUND_S + 30)
def test_killed_worker_restarts_in_place_in_its_slurm_job(slurm_cluster: SlurmCluster, drill_run: Callable[..., DrillRun]) -> None:
    job = drill_run("--inject-failures", "every=2s,kinds=kill,count=1,seed=0")
    job.wait_for(lambda: any(e["event"] == "inject" for e in job.events()), "injected kill")
    (inject,) = [e for e in job.events() if e["event"] == "inject"]
    victim = inject["replica"]
    job.wait_for(lambda: job.rejoined_after(victim, inject["t"]), f"replica {victim} back in the quorum")
    job.stop_and_finish()
    events = job.events()
    after = [e["event"] for e in events if e["t"] >= inject["t"] and str(e.get("replica")) == victim]
    for name in ("detected", "restart_scheduled", "workers_started", "healed", "rejoined"):
        assert name in after, after
    detected = next(e for e in events if e["event"] == "detected" and e["t"] >= inject["t"])
    assert detected["kind"] == "signal" and detected["signal"] == "SIGKILL"
    # Restarted in place: one SLURM job per replica, both completed, on nodes of their own.
    jobs = _jobs(events)
    assert sorted(jobs) == ["0", "1"] and all(len(ids) == 1 for ids in jobs.values()), jobs
    rows = [slurm_cluster.accounting(ids[0])[0] for ids in jobs.values()]
    assert [r["state"] for r in rows] == ["COMPLETED", "COMPLETED"], rows
    assert rows[0]["nodes"] != rows[1]["nodes"], rows
    assert not any(e["event"] == "replica_replacing" for e in events)
    assert_survivor_kept_training(job.run_dir, events, victim, inject["t"])
    assert_identical_finals(job.run_dir)
    assert_nothing_left(slurm_cluster)


@pytest.mark.timeout(BOUND_S + 30)
def test_escalated_replica_is_replaced_by_a_new_slurm_job(slurm_cluster: SlurmCluster, drill_run: Callable[..., DrillRun]) -> None:
    # No restart in place: the killed worker's replica escalates at once.
    job = drill_run("--max-restarts", "0", "--replace-replicas", "1", "--inject-failures", "every=2s,kinds=kill,count=1,seed=0")
    job.wait_for(lambda: any(e["event"] == "replica_replacing" for e in job.events()), "a replacement")
    (replacing,) = [e for e in job.events() if e["event"] == "replica_replacing"]
    job.wait_for(lambda: job.rejoined_after(replacing["replica"], replacing["t"]), "the replacement in the quorum")
    job.stop_and_finish()
    events = job.events()
    # The orchestrator read the escalated failure (a SIGKILL) from the run dir the nodes share.
    _assert_replaced_and_healed(slurm_cluster, job.run_dir, events, replacing["replica"], "FAILED", kind="signal")
    assert not any(e["event"] == "restart_scheduled" for e in events)
    assert_identical_finals(job.run_dir)
    assert_nothing_left(slurm_cluster)


@pytest.mark.timeout(BOUND_S + 30)
def test_scancel_of_a_replica_is_a_failure_the_orchestrator_replaces(
    slurm_cluster: SlurmCluster, drill_run: Callable[..., DrillRun]
) -> None:
    job = drill_run("--replace-replicas", "1")
    job.wait_for(job.both_training_together, "both replicas training in one quorum")
    slurm_cluster.run("scancel", _jobs(job.events())["1"][0])
    job.wait_for(lambda: any(e["event"] == "replica_replacing" for e in job.events()), "a replacement")
    (replacing,) = [e for e in job.events() if e["event"] == "replica_replacing"]
    job.wait_for(lambda: job.rejoined_after("1", replacing["t"]), "the replacement in the quorum")
    job.stop_and_finish()
    _assert_replaced_and_healed(slurm_cluster, job.run_dir, job.events(), "1", "CANCELLED", kind="exit_code")
    assert_identical_finals(job.run_dir)
    assert_nothing_left(slurm_cluster)
