"""benchmarks/collectives.py still runs: every op at a small and a shared-memory size, world 2.

A smoke run only (one round, two iterations): it checks that the benchmark
agrees with Gloo on every op's result, measures both backends and reports the
memory model's bound. It asserts no speed; that is measured on quiet cores
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import sys

import pytest

from commands import REPO_ROOT, repo_env, run_bounded

pytestmark = pytest.mark.timeout(240)

OPS = ["allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all"]
SIZES = [4096, 262144]  # a latency-bound size and one of several tiles per round


def test_collectives_benchmark_checks_and_measures_every_op() -> None:
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "collectives.py"), "--world-size", "2",
               "--ops", ",".join(OPS), "--sizes", ",".join(str(s) for s in SIZES), "--rounds", "1", "--warmup", "1",
               "--min-iters", "1", "--max-iters", "2", "--check-size", "64K", "--torch-threads", "1",
               "--timeout", "200"]  # fmt: skip
    result = run_bounded(command, 220, repo_env())
    assert result.returncode == 0, result.stdout[-4000:]
    line = next((l for l in result.stdout.splitlines() if l.startswith("JSON ")), None)
    assert line is not None, result.stdout[-4000:]
    report = json.loads(line[len("JSON ") :])
    assert report["check"].startswith("ok: "), report["check"]
    assert report["memcpy_gbps"] > 0
    # One torch thread per rank: its copies are also timed split between it and the transport's thread.
    assert report["memcpy_threads"] == 2
    # The bound of each size's ops uses the aggregate memcpy rate at that size.
    assert {int(size) for size in report["memcpy_aggregate_gbps_by_size"]} == set(SIZES)
    assert all(rate > 0 for rate in report["memcpy_aggregate_gbps_by_size"].values())
    rows = {(row["op"], row["size_bytes"]): row for row in report["rows"]}
    assert set(rows) == {(op, size) for op in OPS for size in SIZES}
    for row in rows.values():
        assert row["monarch_us"] > 0 and row["peer_us"] > 0, row
        assert 0 < row["of_bound"], row
        # Both sizes are small enough for the ops' latency (waited on one at a time) to be measured too.
        assert row["monarch_latency_us"] > 0 and row["peer_latency_us"] > 0, row
