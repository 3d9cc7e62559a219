"""How fast monarch and Gloo turn a failure into an error, in one run, on the
same scenarios.

Usage:

    PYTHONPATH=. python benchmarks/failures.py
    PYTHONPATH=. python benchmarks/failures.py --repeats 5 --kill-worlds 4,8 --gloo-timeout 60
    PYTHONPATH=. python benchmarks/failures.py --scenarios kill --kill-worlds 4 --repeats 1

Scenarios (real processes on loopback, rendezvous through a FileStore):

- kill: the last rank SIGKILLs itself in the middle of an allreduce loop;
  measured: time from the kill to the *last* survivor's exception (each
  survivor measures from a stamp the victim wrote just before dying), and
  what the survivors raised.
- stop: the same with SIGSTOP (a hung peer: no socket closes). Monarch
  notices through heartbeats (``MONARCH_HEARTBEAT_TIMEOUT``, default 3 s);
  Gloo only at its op timeout (``--gloo-timeout``, default 60 s): when
  nothing is raised within that bound plus a margin, the row says so.
- abort: rank 0 has an allreduce pending (rank 1 never joins) and another
  thread calls ``ProcessGroup.abort()``; measured: time from abort() to the
  pending ``wait()`` raising, or "not unblocked" when only the
  ``--abort-bound`` wait timeout ended it.
- shrink: after the kill, every survivor calls ``shrink_group([victim])``;
  measured: the slowest survivor's shrink_group latency (monarch), and
  whether a connection was opened. Gloo cannot shrink; the row says what
  it raised.

For every repeat the backends run one after the other (order alternating
between repeats); the table reports medians over ``--repeats``. The table goes
to stdout, followed by one line ``JSON {...}``; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _failure_scenarios import RunConfig, rank_main  # noqa: E402
from _harness import RankResult, run_workers  # noqa: E402

logger = logging.getLogger("failures")

BACKENDS = ("monarch", "gloo")
# Rendezvous and warm-up on a loaded host (the harness bounds start-up itself).
RENDEZVOUS_S = 30.0


@dataclass
class Row:
    scenario: str
    world_size: int
    backend: str
    # One entry per repeat: seconds, or None when nothing was raised in time.
    samples: list[Optional[float]] = field(default_factory=list)
    bound_s: float = 0.0
    # The last survivor raised only when the op timeout expired (in most repeats).
    at_op_timeout: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def median_s(self) -> Optional[float]:
        measured = [s for s in self.samples if s is not None]
        if not measured or len(measured) * 2 < len(self.samples):
            return None  # most repeats saw nothing
        return statistics.median(measured)


def _describe_error(report: dict[str, Any]) -> str:
    """Type, named ranks and the gist of the message (no rank prefix or source path)."""
    if "type" not in report:
        return "nothing raised"
    ranks = f" failed_ranks={report['failed_ranks']}" if report.get("failed_ranks") else " (no rank named)"
    message = report["message"]
    message = message.split("] ", 1)[-1] if message.startswith("[") else message
    if message.startswith("rank ") and ": " in message:
        message = message.split(": ", 1)[1]
    return f"{report['type']}{ranks}: {message[:100]}"


def _summarise(reports: list[dict[str, Any]]) -> list[str]:
    """How many survivors raised what, and the first and last of them."""
    counts: dict[str, int] = {}
    for report in reports:
        counts[_describe_error(report)] = counts.get(_describe_error(report), 0) + 1
    notes = [f"{n}/{len(reports)} survivors: {what}" for what, n in sorted(counts.items())]
    latencies = sorted(r["latency_s"] for r in reports)
    notes.append(f"first survivor raised after {latencies[0] * 1e3:.1f} ms, last after {latencies[-1] * 1e3:.1f} ms")
    return notes


def _run(cfg: RunConfig, bound_s: float, env: dict[str, str], wait_for: Optional[set[int]] = None) -> list[RankResult]:
    """One scenario's ranks. They stay alive after reporting until killed: a
    backend that cannot shut down next to a dead peer does not stall the run."""
    return run_workers(
        rank_main, cfg.world_size, cfg, timeout=RENDEZVOUS_S + bound_s, env=env, wait_for=wait_for, stay_alive=True
    )


def _story(result: RankResult) -> str:
    """What went wrong on a rank, briefly."""
    return (result.error.traceback if result.error else str(result.problem))[-300:]


def _run_fault(cfg: RunConfig, bound_s: float, env: dict[str, str], rows: dict[tuple[str, int, str], Row]) -> None:
    survivors = set(range(cfg.world_size)) - {cfg.victim}
    results = _run(cfg, bound_s, env, wait_for=survivors)
    reports = [results[r].value for r in sorted(survivors) if results[r].ok]
    problems = [f"rank {r}: {_story(results[r])}" for r in sorted(survivors) if not results[r].ok]
    detect = rows.setdefault((cfg.scenario, cfg.world_size, cfg.backend), Row(cfg.scenario, cfg.world_size, cfg.backend))
    detect.bound_s = bound_s
    if problems or len(reports) != len(survivors):
        detect.samples.append(None)
        detect.notes = problems[:2] or ["some survivor raised nothing"]
        return
    latencies = [r["latency_s"] for r in reports]
    detect.samples.append(max(latencies) if max(latencies) <= bound_s else None)
    detect.notes = _summarise(reports)
    detect.at_op_timeout.append(max(latencies) >= 0.95 * cfg.op_timeout_s)
    if detect.at_op_timeout[-1]:
        detect.notes.append(f"the last survivor raised only at the {cfg.op_timeout_s:.0f} s op timeout")
    if cfg.scenario != "kill":
        return
    shrink = rows.setdefault(("shrink", cfg.world_size, cfg.backend), Row("shrink", cfg.world_size, cfg.backend))
    if all("shrink_s" in r for r in reports):
        shrink.samples.append(max(r["shrink_s"] for r in reports))
        connections = sorted({tuple(r["connections"]) for r in reports})
        correct = all(r["shrunk_allreduce_correct"] for r in reports)
        shrink.notes = [f"connections before/after {connections}; allreduce on the shrunk group correct: {correct}"]
    else:
        shrink.samples.append(None)
        errors = sorted({f"{r['shrink_error']['type']}: {r['shrink_error']['message'][:80]}" for r in reports if "shrink_error" in r})
        shrink.notes = ["not supported: " + "; ".join(errors)]


def _run_abort(cfg: RunConfig, env: dict[str, str], rows: dict[tuple[str, int, str], Row]) -> None:
    results = _run(cfg, 2 * cfg.abort_bound_s, env)
    row = rows.setdefault(("abort", cfg.world_size, cfg.backend), Row("abort", cfg.world_size, cfg.backend))
    row.bound_s = cfg.abort_bound_s
    if not results[0].ok:
        row.samples.append(None)
        row.notes = [f"rank 0: {_story(results[0])}"]
        return
    report = results[0].value
    latency = report.get("latency_s")
    # Ended only by the wait() timeout: abort did not unblock the op.
    unblocked = latency is not None and "type" in report and latency < 0.9 * cfg.abort_bound_s
    row.samples.append(latency if unblocked else None)
    note = _describe_error(report) if unblocked else f"wait() ended by its own {cfg.abort_bound_s:.0f} s timeout: {_describe_error(report)}"
    if "abort_error" in report:
        note += f"; abort() raised {report['abort_error']['type']}"
    row.notes = [note]


def _format(row: Optional[Row]) -> str:
    if row is None:
        return "-"
    if row.median_s is None:
        if row.scenario == "shrink":
            return "not supported"
        what = "not unblocked" if row.scenario == "abort" else "no detection"
        return f"{what} within {row.bound_s:.0f} s"
    value = row.median_s
    text = f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
    if sum(row.at_op_timeout) * 2 > len(row.at_op_timeout):
        text += " (op timeout)"
    return text


def print_table(rows: dict[tuple[str, int, str], Row], repeats: int) -> None:
    keys = sorted({(s, w) for s, w, _ in rows}, key=lambda k: (["kill", "stop", "abort", "shrink"].index(k[0]), k[1]))
    header = f"{'scenario':<8} {'world':>5}  {'monarch':>22}  {'gloo':>22}  {'gloo/monarch':>12}"
    print(f"failure handling, median of {repeats} repeat(s); times from the fault to the last survivor's exception")
    print(header)
    print("-" * len(header))
    for scenario, world in keys:
        mine, peer = rows.get((scenario, world, "monarch")), rows.get((scenario, world, "gloo"))
        ratio = "-"
        if mine and peer and mine.median_s and peer.median_s:
            ratio = f"{peer.median_s / mine.median_s:.0f}x"
        elif mine and mine.median_s and peer and peer.median_s is None:
            ratio = "inf"
        print(f"{scenario:<8} {world:>5}  {_format(mine):>22}  {_format(peer):>22}  {ratio:>12}")
    print()
    for (scenario, world, backend), row in sorted(rows.items()):
        for note in row.notes:
            print(f"  {scenario} world {world} {backend}: {note}")
    samples = {f"{s}/{w}/{b}": asdict(r) | {"median_s": r.median_s} for (s, w, b), r in sorted(rows.items())}
    print("JSON " + json.dumps({"repeats": repeats, "rows": samples}))


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="kill,stop,abort", help="comma-separated: kill,stop,abort (shrink comes with kill)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--kill-worlds", default="4,8")
    parser.add_argument("--stop-worlds", default="4")
    parser.add_argument("--abort-world", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gloo-timeout", type=float, default=60.0, help="Gloo's op timeout, seconds")
    parser.add_argument("--monarch-timeout", type=float, default=60.0, help="monarch's op timeout, seconds")
    parser.add_argument("--abort-bound", type=float, default=5.0, help="how long the pending op's wait() waits after abort()")
    parser.add_argument("--heartbeat", type=float, default=None, help="MONARCH_HEARTBEAT_TIMEOUT for monarch (default: its own)")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    args = parse_args(argv)
    scenarios = args.scenarios.split(",")
    backends = args.backends.split(",")
    env: dict[str, str] = {}
    if args.heartbeat is not None:
        env["MONARCH_HEARTBEAT_TIMEOUT"] = str(args.heartbeat)
    rows: dict[tuple[str, int, str], Row] = {}
    plan: list[tuple[str, int]] = []
    plan += [("kill", int(w)) for w in args.kill_worlds.split(",") if "kill" in scenarios]
    plan += [("stop", int(w)) for w in args.stop_worlds.split(",") if "stop" in scenarios]
    plan += [("abort", args.abort_world)] if "abort" in scenarios else []
    for repeat in range(args.repeats):
        for scenario, world in plan:
            order = backends if repeat % 2 == 0 else backends[::-1]
            for backend in order:
                timeout = args.gloo_timeout if backend == "gloo" else args.monarch_timeout
                cfg = RunConfig(scenario, backend, world, timeout, args.abort_bound)
                logger.info("repeat %d/%d: %s world %d on %s", repeat + 1, args.repeats, scenario, world, backend)
                if scenario == "abort":
                    _run_abort(cfg, env, rows)
                else:
                    _run_fault(cfg, timeout + 10.0, env, rows)
    heartbeat = args.heartbeat if args.heartbeat is not None else "default (3 s)"
    print(f"monarch heartbeat timeout: {heartbeat}; op timeouts: monarch {args.monarch_timeout:.0f} s, gloo {args.gloo_timeout:.0f} s")
    print_table(rows, args.repeats)


if __name__ == "__main__":
    main()
