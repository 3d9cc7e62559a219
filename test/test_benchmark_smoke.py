"""benchmarks/collectives.py still runs: every op at a small and a shared-memory size, world 2;
benchmarks/collectives_table.py turns runs into RESULTS.md's tables.

A smoke run only (one round, two iterations): it checks that the benchmark
agrees with Gloo on every op's result, measures both backends and reports the
memory model's bound. It asserts no speed; that is measured on quiet cores
(benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from commands import REPO_ROOT, repo_env, run_bounded
from torch_monarch import _C

pytestmark = pytest.mark.timeout(240)

OPS = ["allreduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all"]
SIZES = [4096, 262144]  # a latency-bound size and one of several tiles per round


def _run_table(*paths: Path) -> Any:
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "collectives_table.py"), *map(str, paths)]
    return run_bounded(command, 60, repo_env())


def _rates_by_threads(report: Any, key: str = "memcpy_aggregate_gbps_by_threads") -> dict[int, dict[int, float]]:
    by_threads = report[key]  # JSON: keys are strings
    return {int(t): {int(size): rate for size, rate in by_size.items()} for t, by_size in by_threads.items()}


def test_collectives_benchmark_checks_and_measures_every_op(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "collectives.py"), "--world-size", "2",
               "--ops", ",".join(OPS), "--sizes", ",".join(str(s) for s in SIZES), "--rounds", "1", "--warmup", "1",
               "--min-iters", "1", "--max-iters", "2", "--check-size", "64K", "--torch-threads", "1",
               "--bound-repeats", "2", "--timeout", "200"]  # fmt: skip
    result = run_bounded(command, 220, repo_env())
    assert result.returncode == 0, result.stdout[-4000:]
    line = next((l for l in result.stdout.splitlines() if l.startswith("JSON ")), None)
    assert line is not None, result.stdout[-4000:]
    report = json.loads(line[len("JSON ") :])
    assert report["check"].startswith("ok: "), report["check"]
    assert report["memcpy_gbps"] > 0
    # Linux counts steal in /proc/stat (0 off a virtual machine).
    assert 0 <= report["host_steal_fraction"] < 1, report["host_steal_fraction"]
    # One torch thread per rank: its copies are also timed split among the monarch group's threads (a second
    # where the ranks may use two CPUs each) and the transport's thread.
    assert report["memcpy_threads"] == (3 if _C.usable_cpus() >= 4 else 2)
    # The bound of each size's ops uses the aggregate memcpy rate at that size, at the group's copying threads
    # and at those plus the transport's.
    group_threads = report["memcpy_threads"] - 1
    rates = _rates_by_threads(report)
    assert set(rates) == {group_threads, group_threads + 1}, rates
    assert all(set(by_size) == set(SIZES) and min(by_size.values()) > 0 for by_size in rates.values()), rates
    in_place = _rates_by_threads(report, "in_place_aggregate_gbps_by_threads")
    assert set(in_place) == set(rates), in_place
    assert all(set(by_size) == set(SIZES) and min(by_size.values()) > 0 for by_size in in_place.values()), in_place
    # Each pass's rate is the highest of its two sweeps.
    sweeps = report["bound_sweeps_gbps"]
    assert set(sweeps) == {"copy", "in_place", "fan_out_2"}, set(sweeps)
    for name, key in (("copy", "memcpy_aggregate_gbps_by_threads"), ("in_place", "in_place_aggregate_gbps_by_threads")):
        for threads, by_size in _rates_by_threads(report, key).items():
            for size, rate in by_size.items():
                assert len(sweeps[name][str(threads)][str(size)]) == 2, sweeps[name]
                assert rate == max(sweeps[name][str(threads)][str(size)]), (name, threads, size, sweeps[name])
    rows = {(row["op"], row["size_bytes"]): row for row in report["rows"]}
    assert set(rows) == {(op, size) for op in OPS for size in SIZES}
    for row in rows.values():
        assert row["monarch_us"] > 0 and row["peer_us"] > 0, row
        assert 0 < row["of_bound"], row
        # Two ranks on one host: every op goes through shared memory, on the group's threads alone.
        assert row["link_bytes_per_op"] == 0 and row["copy_threads"] == group_threads, row
        # Both sizes are small enough for the ops' latency (waited on one at a time) to be measured too.
        assert row["monarch_latency_us"] > 0 and row["peer_latency_us"] > 0, row
        # The slowest single op takes at least the time per op of its run, the mean of the same ops' times.
        assert row["monarch_slowest_op_us"] >= row["monarch_latency_us"] - 5, row
        assert row["peer_slowest_op_us"] >= row["peer_latency_us"] - 5, row
    # allreduce and all_to_all move the same model bytes (2ns); the allreduce writes over its input, so its
    # bound is the faster of the copy and the in-place pass, the all_to_all's the copy's.
    for size in SIZES:
        bound_us = {op: rows[(op, size)]["of_bound"] * rows[(op, size)]["monarch_us"] for op in ("allreduce", "all_to_all")}
        copy, rewrite = rates[group_threads][size], in_place[group_threads][size]
        assert bound_us["allreduce"] / bound_us["all_to_all"] == pytest.approx(copy / max(copy, rewrite), rel=1e-9)
    # At world 2 the all_gather writes each byte it reads twice (the broadcast once, as a copy does): its bound
    # is the faster of the copy and the fan-out pass, which no other op of the run needs.
    assert set(report["fan_out_aggregate_gbps"]) == {"2"}, report["fan_out_aggregate_gbps"]
    fan_out_rates = _rates_by_threads(report["fan_out_aggregate_gbps"], "2")
    assert set(fan_out_rates) == set(rates), fan_out_rates
    for size in SIZES:
        bound_us = {op: rows[(op, size)]["of_bound"] * rows[(op, size)]["monarch_us"] for op in ("all_gather", "all_to_all")}
        copy, fan = rates[group_threads][size], fan_out_rates[group_threads][size]
        # Model bytes: the all_gather's 3s against the all_to_all's 4s.
        assert bound_us["all_gather"] / bound_us["all_to_all"] == pytest.approx(3 / 4 * copy / max(copy, fan), rel=1e-9)
    # The run makes a table: one row per op, one speedup per size.
    run = tmp_path / "run.txt"
    run.write_text(result.stdout)
    table = _run_table(run)
    assert table.returncode == 0, table.stdout
    rows = [line for line in table.stdout.splitlines() if line.startswith("| 2 | ")]
    assert [line.split(" | ")[1] for line in rows] == OPS, table.stdout
    assert all(line.split(" | ")[2].count("x") == len(SIZES) for line in rows), table.stdout


def _synthetic_run(
    path: Path, torch_threads: int, speedup: float, latency_us: Optional[float], steal: Optional[float] = None
) -> Path:
    """A run's stdout as collectives.py prints it, with one op at 4 KB and 16 MB."""
    rows = [
        {"op": "allreduce", "size_bytes": size, "speedup": speedup, "monarch_us": 10.0 * speedup,
         "peer_us": 100.0, "monarch_latency_us": latency_us if size == 4096 else None,
         "peer_latency_us": 200.0 if size == 4096 and latency_us else None, "of_bound": speedup / 10,
         "busbw_gbps": speedup}
        for size in (4096, 16 << 20)
    ]  # fmt: skip
    report = {"peer": "gloo", "world_size": 2, "torch_threads": torch_threads or 8,
              "config": {"torch_threads": torch_threads}, "rows": rows, "host_steal_fraction": steal}  # fmt: skip
    path.write_text("# table lines\nJSON " + json.dumps(report) + "\n")
    return path


def test_collectives_table_cells_are_medians_of_the_runs(tmp_path: Path) -> None:
    # Three runs whose means differ from their medians.
    runs = [
        _synthetic_run(tmp_path / f"t1_{i}.txt", 1, speedup, latency, steal)
        for i, (speedup, latency, steal) in enumerate(((1.0, 30.0, 0.002), (4.0, 50.0, 0.071), (2.0, 31.0, None)))
    ]
    runs.append(_synthetic_run(tmp_path / "default.txt", 0, 5.0, None))
    table = _run_table(*runs)
    assert table.returncode == 0, table.stdout
    one_thread, default = table.stdout.split("the default torch threads per rank")
    # Medians: speedup 2.0 at both sizes, 4 KB times 20 / 100 us, latency 31 / 200 us, 20% of the bound.
    assert "| 2 | allreduce | 2.00x / 2.00x | 20.0 / 100.0 | 31.0 / 200.0 | 20% | 2.00 |" in one_thread, table.stdout
    # Each run's steal, in run order; "-" for a run that did not record it.
    assert "(runs per cell: world 2: 3; host steal per run: world 2: 0.2% / 7.1% / -)" in one_thread, table.stdout
    # A run without latencies says so rather than inventing them.
    assert "| 2 | allreduce | 5.00x / 5.00x | 50.0 / 100.0 | - | 50% | 5.00 |" in default, table.stdout


def test_collectives_table_names_a_file_that_is_no_run(tmp_path: Path) -> None:
    stray = tmp_path / "notes.txt"
    stray.write_text("no report here\n")
    table = _run_table(stray)
    assert table.returncode == 2
    assert "notes.txt: no 'JSON ' line" in table.stdout


def test_host_steal_is_the_hypervisors_share_of_the_cpu_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    from collectives import cpu_times, steal_fraction

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 1 2 3\n")
    before = cpu_times(str(stat))
    stat.write_text("cpu  160 0 70 890 0 0 0 80 0 0\n")
    after = cpu_times(str(stat))
    assert steal_fraction(before, after) == pytest.approx(30 / 200)
    assert steal_fraction(None, after) is None
    assert cpu_times(str(tmp_path / "missing")) is None


def test_an_op_over_the_links_counts_the_transport_thread_in_its_bound() -> None:
    # TCP only: the payload goes over the links, copied by the transport's thread too.
    command = [sys.executable, str(REPO_ROOT / "benchmarks" / "collectives.py"), "--world-size", "2",
               "--ops", "all_gather", "--sizes", "256K", "--rounds", "1", "--warmup", "1", "--min-iters", "1",
               "--max-iters", "2", "--check-size", "0", "--torch-threads", "1", "--transport", "tcp",
               "--timeout", "100"]  # fmt: skip
    result = run_bounded(command, 120, repo_env())
    assert result.returncode == 0, result.stdout[-4000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("JSON "))
    report = json.loads(line[len("JSON ") :])
    (row,) = report["rows"]
    # An all_gather of 256 KiB (the output) sends each rank's half of it.
    assert row["link_bytes_per_op"] >= 128 * 1024, row
    assert row["copy_threads"] == report["memcpy_threads"], row
    rate = _rates_by_threads(report)[row["copy_threads"]][256 * 1024]
    want = (2 + 1) * 256 * 1024 / (rate * 1e9) / (row["monarch_us"] / 1e6)
    assert row["of_bound"] == pytest.approx(want, rel=1e-6), (row, rate)
    assert "all_gather 256K" in result.stdout.split("JSON ")[0]
    # No op of the run writes over its input, so the in-place pass is not timed.
    assert report["in_place_aggregate_gbps_by_threads"] == {}
    assert "in-place pass" not in result.stdout.split("# of bound")[0]


@pytest.mark.parametrize("copy", [_C.streaming_copy, _C.tiled_copy], ids=["streaming", "tiled"])
def test_the_bounds_copy_kernels_copy_every_byte_and_refuse_mismatched_tensors(copy: Any) -> None:
    import torch

    # Not a whole number of tiles or vectors, so the tails are copied too.
    source = torch.randint(-1000, 1000, (3 * 16384 + 7,), dtype=torch.int32)
    destination = torch.zeros_like(source)
    copy(destination, source)
    assert torch.equal(destination, source)
    with pytest.raises(ValueError, match="bytes into"):
        copy(destination[:-1], source)
    with pytest.raises(ValueError, match="contiguous"):
        copy(torch.zeros(2 * source.numel(), dtype=torch.int32)[::2], source)
    assert torch.equal(destination, source)  # a refused copy wrote nothing


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "cached"])
def test_the_fan_out_pass_writes_every_destination_and_refuses_mismatched_tensors(streaming: bool) -> None:
    import torch

    # Over one 64 KiB piece and not a whole number of them, so the pieces' tails are copied too.
    source = torch.randint(-1000, 1000, (3 * 16384 + 7,), dtype=torch.int32)
    destinations = [torch.zeros_like(source) for _ in range(3)]
    _C.fan_out_copy(destinations, source, streaming)
    assert all(torch.equal(destination, source) for destination in destinations)
    fresh = [torch.zeros_like(source), torch.zeros_like(source)[:-1]]
    with pytest.raises(ValueError, match="bytes into"):
        _C.fan_out_copy(fresh, source, streaming)
    assert not fresh[0].any()  # a refused pass wrote nothing
    with pytest.raises(ValueError, match="at least one destination"):
        _C.fan_out_copy([], source, streaming)
