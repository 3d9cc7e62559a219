"""``torch_monarch.demo.goodput``: never above 1 whatever the pace, and it counts lost replicas and stalls."""

from __future__ import annotations

import random

import pytest

from torch_monarch.demo.analysis import Commit, FailureRecord, RunData
from torch_monarch.demo.goodput import goodput

REPLICAS = 4


def _run(times: list[float], end: float, missing: dict[str, set[int]] | None = None) -> RunData:
    """Every replica commits step k+1 at times[k], except the steps in ``missing[replica]``."""
    missing = missing or {}
    commits = {
        str(r): [Commit(t, str(r), k + 1, 1.0, 1, REPLICAS) for k, t in enumerate(times) if k + 1 not in missing.get(str(r), set())]
        for r in range(REPLICAS)
    }
    return RunData(run_dir=None, window_start=0.0, window_end=end, events=[], commits=commits)  # type: ignore[arg-type]


def test_a_steady_failure_free_run_is_one() -> None:
    assert goodput(_run([float(k + 1) for k in range(60)], 60.0), REPLICAS, [], 20) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(5))
def test_a_changing_pace_cannot_lift_it_above_one(seed: int) -> None:
    rng = random.Random(seed)
    t, times = 0.0, []
    for k in range(200):  # jitter, and the machine getting 3x faster half way
        t += rng.uniform(0.2, 1.8) * (1.0 if k < 100 else 0.33)
        times.append(t)
    assert 0.5 < goodput(_run(times, t), REPLICAS, [], 20) <= 1.0


def test_a_replica_out_and_a_stall_count_as_lost() -> None:
    times = [float(k + 1) for k in range(60)]
    out = {"2": set(range(20, 30))}  # replica 2 missed steps 20-29 (and did not contribute to step 30)
    failure = FailureRecord(id=0, kind="kill", replica="2", rank=0, injected_s=19.0, rejoined_s=30.0)
    lost_replica = goodput(_run(times, 60.0, out), REPLICAS, [failure], 20)
    assert lost_replica == pytest.approx(1 - 11 / 60 / REPLICAS, abs=0.02)
    # Nothing committed in the second half of the window: about half of it is lost.
    assert goodput(_run(times[:30], 60.0), REPLICAS, [], 20) == pytest.approx(33 / 60, abs=0.01)
