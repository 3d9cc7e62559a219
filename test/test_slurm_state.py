"""A SLURM job's state as the TorchX scheduler reads it (squeue, then sacct), on SLURM's own output formats.

Fake ``squeue``/``sacct`` on PATH print what SLURM 22.05 prints; the live
cluster tests (test_slurm_*.py) cover the real commands.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torch_monarch.supervision.scheduler.base import ReplicaState
from torch_monarch.supervision.scheduler.slurm import job_state

pytestmark = pytest.mark.timeout(60)


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squeue: str, sacct: str) -> None:
    for name, (out, code) in {"squeue": (squeue, 0 if squeue else 1), "sacct": (sacct, 0)}.items():
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\nprintf '%s' '{out}'\nexit {code}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path('/usr/bin')}:{Path('/bin')}")


@pytest.mark.parametrize(
    "squeue, sacct, state, exitcode",
    [
        ("RUNNING|0\n", "", ReplicaState.RUNNING, None),
        ("COMPLETING|0\n", "", ReplicaState.RUNNING, None),
        ("FAILED|768\n", "", ReplicaState.FAILED, 3),  # squeue's exit_code is the wait status
        ("CANCELLED|15\n", "", ReplicaState.CANCELLED, 128 + 15),
        # The controller forgot the job: sacct's record, whose State TorchX 0.7.0 cannot parse.
        ("", "CANCELLED by 0|0:15\n", ReplicaState.CANCELLED, 128 + 15),
        ("", "COMPLETED|0:0\n", ReplicaState.SUCCEEDED, 0),
        ("", "TIMEOUT|0:0\n", ReplicaState.FAILED, 0),
    ],
)
def test_job_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squeue: str, sacct: str, state: ReplicaState,
                   exitcode: int | None) -> None:
    _fake(tmp_path, monkeypatch, squeue, sacct)
    job = job_state("7")
    assert job is not None and job.replica_state is state and job.exitcode == exitcode


def test_unknown_job_and_unknown_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, "", "")
    assert job_state("7") is None
    _fake(tmp_path, monkeypatch, "SOMETHING_NEW|0\n", "")
    job = job_state("7")
    assert job is not None and job.replica_state is ReplicaState.UNKNOWN and job.name == "SOMETHING_NEW"
