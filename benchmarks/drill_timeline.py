"""The failure drill's timeline under the local scheduler, on SLURM through TorchX, and under Monarch on SLURM.

Each run is ``monarch-run`` with two replicas of the demo's trainer
(per-step sync, forkserver restarts) that trains until told to stop. Once
both replicas train in one quorum, the drill fails replica 1:

* ``kill``: SIGKILL of a worker; the replica restarts it in place;
* ``escalate``: the same with ``--max-restarts 0``: the replica escalates
  and the orchestrator replaces it (a new SLURM job under TorchX, a new
  ReplicaActor under Monarch);
* ``scancel``: the replica's SLURM job is cancelled (TorchX only).

Measured from the failure (the injection event, or the scancel): the
replica's detection of it (``detected``), the orchestrator's (the replacement
decision), the replacement's workers started, and the victim back in a quorum
with the survivor (``rejoined``). Median of ``--repeats`` runs.

SLURM runs need a cluster: ``python test/support/slurm_cluster.py`` starts one
on this machine and prints the ``SLURM_CONF`` to export.

    python benchmarks/drill_timeline.py --setup local,slurm,monarch-slurm --drills kill,escalate,scancel --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "torch_monarch" / "demo" / "train.py"
BOUND_S = 300.0

SETUPS = {
    "local": ("--scheduler", "local"),
    "slurm": ("--scheduler", "slurm"),
    "monarch-slurm": ("--orchestrator", "monarch", "--scheduler", "slurm"),
}
DRILLS = {
    "kill": ("--inject-failures", "every=2s,kinds=kill,count=1,seed=0"),
    "escalate": ("--max-restarts", "0", "--replace-replicas", "1", "--inject-failures", "every=2s,kinds=kill,count=1,seed=0"),
    "scancel": ("--replace-replicas", "1"),
}
COLUMNS = ("detected", "replacing", "replacement_started", "rejoined")


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _rows(run_dir: Path) -> list[Any]:
    from torch_monarch.launch.status_view import replica_rows
    from torch_monarch.supervision.rundir import RunDir

    return replica_rows(RunDir(run_dir), ["0", "1"])


def _together(run_dir: Path) -> bool:
    return all(r.state == "training" and r.participants == 2 for r in _rows(run_dir))


def _wait(process: "subprocess.Popen[str]", predicate: Any, deadline: float, what: str) -> None:
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {what} (monarch-run {'exited' if process.poll() is not None else 'still running'})")
        time.sleep(0.1)


def _slurm_job(events: list[dict[str, Any]], replica: str) -> str:
    return next(e["handle"].rsplit("/", 1)[1] for e in events if e["event"] == "replica_submitted" and e["replica"] == replica)


def run_drill(setup: str, drill: str, workdir: Path) -> dict[str, Optional[float]]:
    """One drill; seconds from the failure to each step of the recovery (None: did not happen)."""
    run_dir = workdir / "run"
    cfg = ("--scheduler-cfg", f"nodelist={os.uname().nodename.split('.')[0]}") if setup == "monarch-slurm" else ()
    command = [sys.executable, "-m", "torch_monarch.run", *SETUPS[setup], *cfg, "--replicas", "2", "--nproc-per-node", "1",
               "--min-replicas", "1", "--status", "none", "--sync", "per-step", "--preload", "torch_monarch.demo.warmup",
               "--run-dir", str(run_dir), *DRILLS[drill], str(TRAIN)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    process = subprocess.Popen(command, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + BOUND_S
    try:
        _wait(process, lambda: _together(run_dir), deadline, "quorum of both replicas")
        if drill == "scancel":
            t0 = time.time()
            subprocess.run(["scancel", _slurm_job(_events(run_dir), "1")], check=True)
        else:
            _wait(process, lambda: any(e["event"] == "inject" for e in _events(run_dir)), deadline, "injection")
            t0 = next(e["t"] for e in _events(run_dir) if e["event"] == "inject")
        victim = "1" if drill == "scancel" else next(e["replica"] for e in _events(run_dir) if e["event"] == "inject")

        def rejoined() -> bool:
            back = any(e["event"] == "rejoined" and e["replica"] == victim and e["t"] > t0 for e in _events(run_dir))
            return back and _together(run_dir)

        _wait(process, rejoined, deadline, "rejoin")
        steps = [r.step or 0 for r in _rows(run_dir)]
        (run_dir / "control.json").write_text(json.dumps({"start": True, "stop_at_step": max(steps) + 10}))
        process.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    after = [e for e in _events(run_dir) if e["t"] > t0 and str(e.get("replica")) == victim]

    def first(name: str, **match: Any) -> Optional[float]:
        hit = next((e for e in after if e["event"] == name and all(e.get(k) == v for k, v in match.items())), None)
        return round(hit["t"] - t0, 2) if hit is not None else None

    replacing = first("replica_replacing")
    started = None
    if replacing is not None:
        started = next((round(e["t"] - t0, 2) for e in after if e["event"] == "workers_started" and e["t"] - t0 > replacing), None)
    return {"detected": first("detected"), "replacing": replacing, "replacement_started": started, "rejoined": first("rejoined")}


def _median(values: list[Optional[float]]) -> str:
    seen = [v for v in values if v is not None]
    return f"{statistics.median(seen):.1f}" if seen else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", default="local,slurm,monarch-slurm")
    parser.add_argument("--drills", default="kill,escalate,scancel")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| setup | drill | runs | detected (s) | replacement decided (s) | replacement's workers started (s) | rejoined (s) |")
    print("|---|---|---|---|---|---|---|")
    for setup in args.setup.split(","):
        for drill in args.drills.split(","):
            if drill == "scancel" and setup != "slurm":
                continue  # only a replica that is a SLURM job of its own can be scancel'd alone
            runs = []
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="drill-") as workdir:
                    runs.append(run_drill(setup, drill, Path(workdir)))
            medians = [_median([r[c] for r in runs]) for c in COLUMNS]
            print(f"| {setup} | {drill} | {len(runs)} | {' | '.join(medians)} |", flush=True)
            print(f"<!-- {setup} {drill}: {json.dumps(runs)} -->", flush=True)


if __name__ == "__main__":
    main()
