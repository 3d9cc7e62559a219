"""What Monarch's fast supervision poll costs: CPU of an idle Monarch job, 200ms vs Monarch's 10s default.

The job is the Monarch orchestrator's shape without training: a client, a
ReplicaActor-like owner proc and a mesh of idle trainer procs under it. For
each poll setting (``HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY``) a fresh
job runs in a subprocess, idles for ``--seconds``, and reports the CPU time
(user + system, from /proc) that the client and every proc used meanwhile.
Settings alternate over ``--repeats`` rounds; the table gives medians.

    PYTHONPATH=. python benchmarks/monarch_poll_cost.py --seconds 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Optional

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def idle_job(seconds: float, trainers: int) -> dict[str, float]:
    """Runs in the subprocess: spawn, idle, measure."""
    from monarch.actor import Actor, endpoint, this_host

    class Idle(Actor):
        @endpoint
        def pid(self) -> int:
            return os.getpid()

    class Owner(Actor):
        @endpoint
        async def start(self, n: int) -> list[int]:
            self.procs = this_host().spawn_procs(per_host={"procs": n})
            self.idle = self.procs.spawn("idle", Idle)
            values = await self.idle.pid.call()
            return [os.getpid(), *(values.get(r) for r in range(n))]

    procs = this_host().spawn_procs(per_host={"procs": 1})
    owner = procs.spawn("owner", Owner)
    pids = [os.getpid(), *owner.start.call_one(trainers).get()]
    time.sleep(2.0)  # let start-up work settle before the window
    before = {pid: _cpu_s(pid) for pid in pids}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    used = sum(_cpu_s(pid) - before[pid] for pid in pids)
    procs.stop().get()
    return {"cpu_s": used, "elapsed_s": elapsed, "processes": len(pids)}


def _measure(poll: str, seconds: float, trainers: int) -> dict[str, float]:
    env = {**os.environ, "HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY": poll, "RUST_LOG": "warn"}
    code = f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import monarch_poll_cost as m; print('RESULT', json.dumps(m.idle_job({seconds}, {trainers})))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=seconds + 120)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"poll {poll}: no result\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return json.loads(line[len("RESULT ") :])


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--trainers", type=int, default=2, help="idle trainer procs under the owner")
    p.add_argument("--polls", default="200ms,10s")
    args = p.parse_args(argv)
    polls = [x for x in args.polls.split(",") if x]
    runs: dict[str, list[float]] = {poll: [] for poll in polls}
    for _ in range(args.repeats):
        for poll in polls:  # interleaved, so machine load hits both alike
            r = _measure(poll, args.seconds, args.trainers)
            runs[poll].append(100.0 * r["cpu_s"] / r["elapsed_s"])
    processes = 2 + args.trainers
    print(f"idle Monarch job: client + owner + {args.trainers} trainer procs, {args.seconds:.0f}s windows, {args.repeats} rounds")
    print(f"{'poll':>8} {'CPU % of one core (median)':>28} {'min':>7} {'max':>7} {'per process':>12}")
    for poll, values in runs.items():
        median = statistics.median(values)
        print(f"{poll:>8} {median:>28.2f} {min(values):>7.2f} {max(values):>7.2f} {median / processes:>12.2f}")
    print(json.dumps({"benchmark": "monarch_poll_cost", "seconds": args.seconds, "trainers": args.trainers, "cpu_percent": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
