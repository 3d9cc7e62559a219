"""Recovery from injected failures: torch_monarch vs TorchFT's default setup, per-step vs DiLoCo-20.

Runs the demo's job (replica groups training the tiny LM) under the same
failure drill, for every setup and every synchronisation:

setups
    ``monarch``: "monarch" backend inside replicas, ProcessGroupMonarch
    across them, Lighthouse heartbeat timeout 0.5 s / join timeout 5 s, hang
    probes, the first restart at once (then backoff from 0.5 s), workers
    forked from a preloaded forkserver.
    ``torchft-default``: what TorchFT ships: Gloo inside replicas (torch's
    default 30 min op timeout), TorchFT's ProcessGroupGloo across them,
    Manager and process-group timeouts 60 s, Lighthouse heartbeat timeout
    5 s / join timeout 60 s, and a torchrun-style agent per replica
    (restarts on exit, no hang detection, new interpreters).
    ``monarch-actors``: the ``monarch`` setup supervised by real Monarch
    actors instead of the embedded orchestrator (``--orchestrator monarch``:
    OrchestrationManager, ReplicaActors restarting their trainer mesh from a
    standby mesh, trainer procs forked from a per-replica forkserver).
syncs
    ``per-step``: quorum and gradient allreduce across replicas at every
    step. ``diloco-20``: TorchFT's DiLoCo, an outer sync every 20 steps.

Each (setup, sync) pair runs one failure-free phase (the final loss to
compare against) and ``--runs`` phases with failures. Per failure it
measures detection (injection -> the supervisor's report), the healthy
replicas' longest stall between two commits (steps or outer syncs), the
commits (steps or outer syncs) the healthy replicas failed, and rejoin
(injection -> the restarted replica commits again); per run the goodput
(``torch_monarch.demo.goodput``: useful work against the same run's
failure-free pace, never above 1), whether the final parameters are
identical across replicas, and the final loss against the failure-free
phase. Prints the tables (medians; goodput min/median/max over runs) and
one JSON line.

    PYTHONPATH=. python benchmarks/recovery.py --runs 3                  # 4 replicas x 2 workers, each kind once a run
    PYTHONPATH=. python benchmarks/recovery.py --setups monarch --syncs diloco-20 --kinds kill,hang
    PYTHONPATH=. python benchmarks/recovery.py --orchestrator monarch    # adds the monarch-actors rows
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

# TorchFT's Rust side logs every quorum at INFO; the embedded Lighthouse runs in this process.
os.environ.setdefault("RUST_LOG", "warn")

from torch_monarch.demo.analysis import FailureRecord, analyse_failures, eval_final_params, load_run, missed_syncs
from torch_monarch.demo.config import DemoConfig
from torch_monarch.demo.data import MarkovData
from torch_monarch.demo.device import DeviceUnavailableError, require_device
from torch_monarch.demo.goodput import goodput
from torch_monarch.demo.model import TinyLM
from torch_monarch.demo.runner import PhaseResult, PhaseSpec, run_phase
from torch_monarch.launch.inject import InjectionSpec
from torch_monarch.quorum.lighthouse import TORCHFT_DEFAULTS
from torch_monarch.quorum.sync import SyncConfig

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
            "MONARCH_DEMO_PG_TIMEOUT": "1800",
            "MONARCH_QUORUM_TIMEOUT": "60",
            "MONARCH_QUORUM_QUORUM_TIMEOUT": "60",
            "MONARCH_QUORUM_CONNECT_TIMEOUT": "60",
        },
        "lighthouse": TORCHFT_DEFAULTS,
        "extra_args": ["--no-hang-detection", "--restart-backoff", "0"],
        "preload": False,
    },
}

SYNCS: dict[str, SyncConfig] = {
    "per-step": SyncConfig(mode="per-step"),
    "diloco-20": SyncConfig(mode="diloco", every=20),
}


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def _fmt(value: Optional[float], spec: str = "6.2f") -> str:
    return "never" if value is None else format(value, spec)


def _phase(name: str, setup: str, sync: str, args: argparse.Namespace, out: Path, inject: Optional[InjectionSpec]) -> PhaseResult:
    config = SETUPS[setup]
    return run_phase(
        PhaseSpec(
            name=name,
            run_dir=out / name,
            duration=args.every * (len(args.kinds.split(",")) + 1),
            replicas=args.replicas,
            workers=args.workers,
            min_replicas=2,
            inject=inject,
            status="none",
            env=config["env"],
            lighthouse=config["lighthouse"],
            extra_args=config["extra_args"],
            preload=config["preload"],
            config=dataclasses.replace(DemoConfig(), device=args.device),
            orchestrator=config.get("orchestrator", "embedded"),
            stop_timeout=args.stop_timeout,
            sync=SYNCS[sync],
        )
    )


def _commit_interval(records: Any) -> Optional[float]:
    """Median time between two commits of one replica (a step, or an outer sync)."""
    gaps = [b.t - a.t for cs in records.commits.values() for a, b in zip(cs, cs[1:])]
    return _median(gaps)


def measure(setup: str, sync: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One failure-free phase, then ``args.runs`` phases with failures, of (setup, sync)."""
    cfg = DemoConfig()
    eval_set = MarkovData(cfg).eval_set()
    inner_per_commit = SYNCS[sync].every if SYNCS[sync].mode == "diloco" else 1
    kinds = tuple(k for k in args.kinds.split(",") if k)
    duration = args.every * (len(kinds) + 1)
    label = f"{setup}/{sync}"
    print(f"[{label}] failure-free, {duration:.0f}s", flush=True)
    base = _phase(f"{setup}-{sync}-baseline", setup, sync, args, out, None)
    base_loss = eval_final_params(base.spec.run_dir, eval_set, TinyLM(cfg))["loss"]
    runs = []
    for i in range(args.runs):
        inject = InjectionSpec(every=args.every, kinds=kinds, seed=args.seed + i, until=duration - args.every / 2)
        print(f"[{label}] run {i + 1}/{args.runs} with failures ({', '.join(kinds)}; every {args.every:.0f}s)", flush=True)
        failed = _phase(f"{setup}-{sync}-failures-{i}", setup, sync, args, out, inject)
        run = load_run(failed.spec.run_dir)
        records = analyse_failures(run, args.replicas)
        final = eval_final_params(failed.spec.run_dir, eval_set, TinyLM(cfg))
        runs.append(
            {
                "goodput": goodput(run, args.replicas, records, inner_per_commit),
                "healthy_missed_syncs": missed_syncs(run, records),
                "healthy_retried_syncs": missed_syncs(run, records, work_kept=True),
                "commit_interval_s": _commit_interval(run),
                "final_params_identical": bool(final["identical"] and final["replicas"] == args.replicas),
                "final_loss": final["loss"],
                "loss_vs_failure_free": final["loss"] / base_loss if final["loss"] and base_loss else None,
                "succeeded": failed.succeeded,
                "load_average": failed.load_average,
                "failures": [r.to_json() for r in records],
                "records": records,
            }
        )
    return {"setup": setup, "sync": sync, "baseline_final_loss": base_loss, "baseline_load_average": base.load_average, "runs": runs}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    records: list[FailureRecord] = [r for run in result["runs"] for r in run["records"]]
    goodputs = [run["goodput"] for run in result["runs"] if run["goodput"] is not None]
    losses = [run["loss_vs_failure_free"] for run in result["runs"] if run["loss_vs_failure_free"] is not None]
    return {
        "failures": len(records),
        "recovered": sum(r.recovered for r in records),
        "detection_s": _median([r.detection_s for r in records if r.detection_s is not None]),
        "healthy_stall_s": _median([r.healthy_stall_s for r in records if r.healthy_stall_s is not None]),
        "healthy_max_stall_s": max((r.healthy_stall_s for r in records if r.healthy_stall_s is not None), default=None),
        "healthy_missed_syncs": sum(run["healthy_missed_syncs"] for run in result["runs"]),
        "healthy_retried_syncs": sum(run["healthy_retried_syncs"] for run in result["runs"]),
        "rejoin_s": _median([r.rejoin_s for r in records if r.rejoin_s is not None]) if all(r.recovered for r in records) else None,
        "commit_interval_s": _median([run["commit_interval_s"] for run in result["runs"] if run["commit_interval_s"]]),
        "goodput": [min(goodputs), statistics.median(goodputs), max(goodputs)] if goodputs else None,
        "identical": all(run["final_params_identical"] for run in result["runs"]),
        "loss_vs_failure_free": _median(losses),
    }


def by_kind(records: list[FailureRecord]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(r.kind for r in records):
        rs = [r for r in records if r.kind == kind]
        out[kind] = {
            "n": len(rs),
            "recovered": sum(r.recovered for r in rs),
            "detection_s": _median([r.detection_s for r in rs if r.detection_s is not None]),
            "healthy_max_stall_s": max((r.healthy_stall_s for r in rs if r.healthy_stall_s is not None), default=None),
            "healthy_missed_syncs": sum(r.healthy_missed_syncs for r in rs),
            "rejoin_s": _median([r.rejoin_s for r in rs if r.rejoin_s is not None]) if all(r.recovered for r in rs) else None,
        }
    return out


def print_tables(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print(f"Recovery from injected failures: {args.replicas} replicas x {args.workers} workers, one failure every {args.every:.0f}s, "
          f"{args.runs} run(s) with failures per row")
    print("detection: injection -> supervisor's report; stall: longest gap between two commits of a healthy replica; "
          "missed: commits the healthy replicas failed, losing their work; retried: failed DiLoCo syncs retried with the work kept; rejoin: injection -> the failed replica commits again (medians)")
    print("goodput: useful work against the same run's failure-free pace (<= 1), min/median/max over runs; "
          "loss: final loss / the failure-free phase's (median)")
    print(f"{'setup':<16} {'sync':<10} {'failures':>8} {'recovered':>9} {'detection s':>11} {'stall s':>8} {'max stall s':>11} "
          f"{'commit every s':>14} {'missed':>6} {'retried':>7} {'rejoin s':>8} {'goodput min/med/max':>20} {'identical':>9} {'loss':>6}")
    for r in results:
        s = summarise(r)
        gp = "/".join(f"{g:.3f}" for g in s["goodput"]) if s["goodput"] else "-"
        print(f"{r['setup']:<16} {r['sync']:<10} {s['failures']:>8} {s['recovered']:>9} {_fmt(s['detection_s']):>11} "
              f"{_fmt(s['healthy_stall_s']):>8} {_fmt(s['healthy_max_stall_s']):>11} {_fmt(s['commit_interval_s'], '6.3f'):>14} "
              f"{s['healthy_missed_syncs']:>6} {s['healthy_retried_syncs']:>7} {_fmt(s['rejoin_s']):>8} {gp:>20} {str(s['identical']):>9} "
              f"{_fmt(s['loss_vs_failure_free'], '6.3f'):>6}")
    print()
    print(f"{'kind':<6} {'setup':<16} {'sync':<10} {'n':>2} {'recovered':>9} {'detection s':>11} {'max stall s':>11} {'missed':>6} {'rejoin s':>8}")
    kinds = list(dict.fromkeys(k for r in results for run in r["runs"] for k in by_kind(run["records"])))
    for kind in kinds:
        for r in results:
            k = by_kind([rec for run in r["runs"] for rec in run["records"]]).get(kind)
            if k is not None:
                print(f"{kind:<6} {r['setup']:<16} {r['sync']:<10} {k['n']:>2} {k['recovered']:>9} {_fmt(k['detection_s']):>11} "
                      f"{_fmt(k['healthy_max_stall_s']):>11} {k['healthy_missed_syncs']:>6} {_fmt(k['rejoin_s']):>8}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setups", default="monarch,torchft-default")
    p.add_argument("--syncs", default="per-step,diloco-20", help=f"from {', '.join(SYNCS)}")
    p.add_argument("--kinds", default="kill,segv,comm,exc,hang", help="hang last: TorchFT's default setup never recovers it")
    p.add_argument("--runs", type=int, default=3, help="phases with failures per (setup, sync) (default 3)")
    p.add_argument("--every", type=float, default=20.0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the replicas train (cuda: round-robin over the visible GPUs)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stop-timeout", type=float, default=60.0)
    p.add_argument("--out", default="")
    p.add_argument(
        "--orchestrator",
        choices=["embedded", "monarch"],
        default="embedded",
        help="monarch: also run the monarch-actors setup (real Monarch actors orchestrate)",
    )
    args = p.parse_args(argv)
    try:
        require_device(args.device)  # before any phase: one error naming the missing build or device
    except DeviceUnavailableError as e:
        print(f"recovery: {e}", file=sys.stderr)
        return 2
    if args.orchestrator == "monarch" and "monarch-actors" not in args.setups.split(","):
        args.setups += ",monarch-actors"
    pairs = [(s, y) for s in args.setups.split(",") if s for y in args.syncs.split(",") if y]
    unknown = [name for s, y in pairs for name, known in ((s, SETUPS), (y, SYNCS)) if name not in known]
    if unknown or args.runs < 1:
        p.error(f"unknown setups/syncs {unknown}" if unknown else "--runs must be >= 1")
    out = Path(args.out or tempfile.mkdtemp(prefix="monarch-recovery-"))
    results = [measure(setup, sync, args, out) for setup, sync in pairs]
    print_tables(results, args)
    line = {
        "benchmark": "recovery",
        "replicas": args.replicas,
        "workers": args.workers,
        "every_s": args.every,
        "results": [
            {
                "setup": r["setup"],
                "sync": r["sync"],
                "summary": summarise(r),
                "baseline_final_loss": r["baseline_final_loss"],
                "runs": [{k: v for k, v in run.items() if k != "records"} for run in r["runs"]],
            }
            for r in results
        ],
        "out": str(out),
    }
    print(json.dumps(line, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
