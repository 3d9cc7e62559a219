"""Recovery from injected failures: torch_monarch vs TorchFT's default setup.

Runs the demo's job (replica groups training the tiny LM with per-step
synchronisation) under the same failure drill in two setups, each also
without failures for the same time (the goodput baseline):

``monarch``
    "monarch" backend inside replicas, ProcessGroupMonarch across them,
    Lighthouse heartbeat timeout 1 s / join timeout 5 s, hang probes, restart
    backoff 0.5 s, workers forked from a preloaded forkserver.
``monarch-actors``
    the ``monarch`` setup supervised by real Monarch actors instead of the
    embedded orchestrator (``--orchestrator monarch``: OrchestrationManager,
    ReplicaActors restarting their trainer mesh from a standby mesh).
``torchft-default``
    what TorchFT ships: Gloo inside replicas (torch's default 30 min op
    timeout), TorchFT's ProcessGroupGloo across them, Manager and
    process-group timeouts 60 s, Lighthouse
    heartbeat timeout 5 s / join timeout 60 s, and a torchrun-style agent per
    replica (restarts on exit, no hang detection, new interpreters).

For every injected failure it reports the time until the healthy replicas
commit their next step (in the reformed quorum) and their longest stall,
the time until the failed replica is back in the quorum, and each setup's
goodput. Prints a table and one JSON line.

    PYTHONPATH=. python benchmarks/recovery.py                   # 4 replicas x 2 workers, every kind once
    PYTHONPATH=. python benchmarks/recovery.py --repeats 2 --kinds kill,hang
    PYTHONPATH=. python benchmarks/recovery.py --orchestrator monarch     # adds the monarch-actors rows
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

# TorchFT's Rust side logs every quorum at INFO; the embedded Lighthouse runs in this process.
os.environ.setdefault("RUST_LOG", "warn")

from torch_monarch.demo.analysis import FailureRecord, analyse_failures, load_run
from torch_monarch.demo.runner import PhaseSpec, run_phase
from torch_monarch.launch.inject import InjectionSpec
from torch_monarch.quorum.lighthouse import TORCHFT_DEFAULTS

SETUPS: dict[str, dict[str, Any]] = {
    "monarch": {
        "env": {"MONARCH_FT_PG": "monarch", "MONARCH_DEMO_BACKEND": "monarch"},
        "lighthouse": None,  # torch_monarch's defaults
        "extra_args": [],
        "preload": True,
    },
    "monarch-actors": {
        "env": {"MONARCH_FT_PG": "monarch", "MONARCH_DEMO_BACKEND": "monarch"},
        "lighthouse": None,
        "extra_args": [],
        "preload": True,
        "orchestrator": "monarch",
    },
    "torchft-default": {
        "env": {
            "MONARCH_FT_PG": "gloo",
            "MONARCH_DEMO_BACKEND": "gloo",
            "MONARCH_DEMO_PG_TIMEOUT_S": "1800",
            "MONARCH_QUORUM_TIMEOUT_S": "60",
            "MONARCH_QUORUM_QUORUM_TIMEOUT_S": "60",
            "MONARCH_QUORUM_CONNECT_TIMEOUT_S": "60",
        },
        "lighthouse": TORCHFT_DEFAULTS,
        "extra_args": ["--no-hang-detection", "--restart-backoff", "0"],
        "preload": False,
    },
}


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _fmt(value: Optional[float]) -> str:
    return "never" if value is None else f"{value:6.2f}"


def run_setup(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    setup = SETUPS[name]
    kinds = tuple(k for k in args.kinds.split(",") for _ in range(args.repeats))
    duration = args.every * (len(kinds) + 1)
    inject = InjectionSpec(every_s=args.every, kinds=kinds, seed=args.seed, until_s=duration - args.every / 2)
    common = dict(
        duration_s=duration,
        replicas=args.replicas,
        workers=args.workers,
        min_replicas=2,
        status="none",
        env=setup["env"],
        lighthouse=setup["lighthouse"],
        extra_args=setup["extra_args"],
        preload=setup["preload"],
        orchestrator=setup.get("orchestrator", "embedded"),
        stop_timeout_s=args.stop_timeout,
    )
    print(f"[{name}] with failures ({', '.join(kinds)}; every {args.every:.0f}s, {duration:.0f}s)", flush=True)
    failed = run_phase(PhaseSpec(name=f"{name}-failures", run_dir=out / f"{name}-failures", inject=inject, **common))
    print(f"[{name}] failure-free, {duration:.0f}s", flush=True)
    base = run_phase(PhaseSpec(name=f"{name}-baseline", run_dir=out / f"{name}-baseline", **common))
    run = load_run(failed.spec.run_dir)
    baseline = load_run(base.spec.run_dir)
    records = analyse_failures(run, args.replicas)
    rate = run.committed_steps() / max(run.duration_s, 1e-9)
    base_rate = baseline.committed_steps() / max(baseline.duration_s, 1e-9)
    return {
        "setup": name,
        "goodput": rate / base_rate if base_rate else None,
        "steps_per_s": rate,
        "baseline_steps_per_s": base_rate,
        "load_average": {"failures": failed.load_average, "baseline": base.load_average},
        "failures": [r.to_json() for r in records],
        "records": records,
    }


def by_kind(records: list[FailureRecord]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(r.kind for r in records):
        rs = [r for r in records if r.kind == kind]
        out[kind] = {
            "n": len(rs),
            "recovered": sum(r.recovered for r in rs),
            "detection_s": _median([r.detection_s for r in rs if r.detection_s is not None]),
            "healthy_next_commit_s": _median([r.healthy_reform_s for r in rs if r.healthy_reform_s is not None]),
            "healthy_max_stall_s": max((r.healthy_stall_s for r in rs if r.healthy_stall_s is not None), default=None),
            "rejoin_s": _median([r.rejoin_s for r in rs if r.rejoin_s is not None]) if all(r.recovered for r in rs) else None,
        }
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setups", default="monarch,torchft-default")
    p.add_argument("--kinds", default="kill,segv,comm,exc,hang", help="hang last: TorchFT's default setup never recovers it")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--every", type=float, default=20.0)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stop-timeout", type=float, default=60.0)
    p.add_argument("--out", default="")
    p.add_argument("--orchestrator", choices=["embedded", "monarch"], default="embedded",
                   help="monarch: also run the monarch-actors setup (real Monarch actors orchestrate)")
    args = p.parse_args(argv)
    if args.orchestrator == "monarch" and "monarch-actors" not in args.setups.split(","):
        args.setups += ",monarch-actors"
    out = Path(args.out or tempfile.mkdtemp(prefix="monarch-recovery-"))
    results = [run_setup(name, args, out) for name in args.setups.split(",") if name]

    print()
    print(f"Recovery from injected failures: {args.replicas} replicas x {args.workers} workers, one failure every {args.every:.0f}s")
    print("healthy next commit: injection -> first commit of the healthy replicas in the reformed quorum (median)")
    print("healthy stall: longest gap between two commits of a healthy replica (max); rejoin: injection -> failed replica commits again (median)")
    header = f"{'kind':<6} {'setup':<16} {'n':>2} {'recovered':>9} {'detection s':>12} {'healthy next commit s':>22} {'healthy stall s':>16} {'rejoin s':>9}"
    print(header)
    kinds = list(dict.fromkeys(k for r in results for k in by_kind(r["records"])))
    for kind in kinds:
        for r in results:
            k = by_kind(r["records"]).get(kind)
            if k is None:
                continue
            print(
                f"{kind:<6} {r['setup']:<16} {k['n']:>2} {k['recovered']:>9} {_fmt(k['detection_s']):>12} {_fmt(k['healthy_next_commit_s']):>22} "
                f"{_fmt(k['healthy_max_stall_s']):>16} {_fmt(k['rejoin_s']):>9}"
            )
    for r in results:
        print(
            f"goodput {r['setup']:<16} {r['goodput']:.3f}  ({r['steps_per_s']:.1f} vs {r['baseline_steps_per_s']:.1f} steps/s; "
            f"load average {r['load_average']})"
        )
    if len(results) == 2 and results[1]["goodput"]:
        print(f"goodput ratio {results[0]['setup']}/{results[1]['setup']}: {results[0]['goodput'] / results[1]['goodput']:.2f}x")
    line = {
        "benchmark": "recovery",
        "replicas": args.replicas,
        "workers": args.workers,
        "every_s": args.every,
        "results": [{k: v for k, v in r.items() if k != "records"} | {"by_kind": by_kind(r["records"])} for r in results],
        "out": str(out),
    }
    print(json.dumps(line, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
