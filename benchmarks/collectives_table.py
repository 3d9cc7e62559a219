"""RESULTS.md's tables from runs of collectives.py: a cell is the median over runs of each run's median.

Usage:

    python benchmarks/collectives.py ... > run1.txt   # as many runs as wanted, any worlds
    python benchmarks/collectives_table.py run1.txt run2.txt ...

Each file is the stdout of one ``collectives.py`` run; its ``JSON`` line is
read. Runs are grouped by their ``--torch-threads`` (one table each; 0, the
default, gives each rank the host's CPUs / world) and world size; rows are
(world, op). Columns: the speedup over the peer at every size
measured; at the smallest size, the time per op back to back and, where it was
measured, the latency of ops waited on one at a time, monarch / peer; from
``LARGE_BYTES``, the fraction of the memory bound and the busbw. Under each
table, the runs per cell and each run's host steal (the CPU time the
hypervisor gave to others; "-" for runs that did not record it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from typing import Any, Optional, Sequence

from collectives import format_pair, format_size

__all__ = ["format_tables", "load_report", "main"]

# Sizes from which a table reports the fraction of the bound and the busbw.
LARGE_BYTES = 16 * 1024 * 1024

Report = dict[str, Any]
Row = dict[str, Any]


def load_report(path: str) -> Report:
    """The report of one run: the JSON line of its stdout."""
    with open(path) as lines:
        for line in lines:
            if line.startswith("JSON "):
                report: Report = json.loads(line[len("JSON ") :])
                return report
    raise ValueError(f"{path}: no 'JSON ' line; is it the stdout of benchmarks/collectives.py?")


def _median(rows: list[Row], key: str) -> Optional[float]:
    values = [row[key] for row in rows if row.get(key) is not None]
    return statistics.median(values) if values else None


def _pair(rows: list[Row], monarch_key: str, peer_key: str) -> str:
    return format_pair(_median(rows, monarch_key), _median(rows, peer_key))


def _table(reports: list[Report]) -> list[str]:
    """One table for runs of one torch-threads setting."""
    peer = reports[0]["peer"]
    cells: dict[tuple[int, str, int], list[Row]] = defaultdict(list)
    runs: dict[int, int] = defaultdict(int)
    ops: list[str] = []
    for report in reports:
        runs[report["world_size"]] += 1
        for row in report["rows"]:
            cells[(report["world_size"], row["op"], row["size_bytes"])].append(row)
            if row["op"] not in ops:
                ops.append(row["op"])
    sizes = sorted({size for _, _, size in cells})
    large = [size for size in sizes if size >= LARGE_BYTES]
    small = sizes[0]
    head = [
        "world",
        "op",
        "speedup " + " / ".join(format_size(size) for size in sizes),
        f"{format_size(small)} us monarch / {peer}",
        f"{format_size(small)} latency us monarch / {peer}",
    ]
    if large:
        sizes_label = " / ".join(format_size(size) for size in large)
        head += [f"of bound {sizes_label}", f"busbw {sizes_label} GB/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for world in sorted(runs):
        for op in ops:
            at = {size: cells.get((world, op, size), []) for size in sizes}
            if not any(at.values()):
                continue
            speedups = [_median(at[size], "speedup") for size in sizes]
            row = [
                str(world),
                op,
                " / ".join("-" if s is None else f"{s:.2f}x" for s in speedups),
                _pair(at[small], "monarch_us", "peer_us"),
                _pair(at[small], "monarch_latency_us", "peer_latency_us"),
            ]
            if large:
                bounds = [_median(at[size], "of_bound") for size in large]
                busbw = [_median(at[size], "busbw_gbps") for size in large]
                row.append(" / ".join("-" if b is None else f"{b * 100:.0f}%" for b in bounds))
                row.append(" / ".join("-" if b is None else f"{b:.2f}" for b in busbw))
            lines.append("| " + " | ".join(row) + " |")
    counts = ", ".join(f"world {world}: {count}" for world, count in sorted(runs.items()))
    steal = "; ".join(
        f"world {world}: " + " / ".join(_steal(report) for report in reports if report["world_size"] == world)
        for world in sorted(runs)
    )
    lines.append(f"(runs per cell: {counts}; host steal per run: {steal})")
    return lines


def _steal(report: Report) -> str:
    fraction = report.get("host_steal_fraction")
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def _threads_label(setting: int) -> str:
    return "the default torch threads per rank (CPUs / world)" if setting == 0 else f"{setting} torch thread(s) per rank"


def format_tables(reports: Sequence[Report]) -> str:
    """Markdown, one table per ``--torch-threads`` setting, the explicit ones first."""
    by_setting: dict[int, list[Report]] = defaultdict(list)
    for report in reports:
        by_setting[report["config"]["torch_threads"]].append(report)
    blocks = []
    for setting in sorted(by_setting, key=lambda threads: (threads == 0, threads)):
        blocks.append(f"{_threads_label(setting)}:\n\n" + "\n".join(_table(by_setting[setting])))
    return "\n\n".join(blocks)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="stdout files of benchmarks/collectives.py")
    args = parser.parse_args(argv)
    try:
        reports = [load_report(path) for path in args.runs]
    except (OSError, ValueError) as error:
        print(f"collectives_table: {error}", file=sys.stderr)
        return 2
    print(format_tables(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
