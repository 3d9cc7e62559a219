"""The fault-tolerance demo: ``python -m torch_monarch.demo``.

4 replica groups × 2 workers (CPU) train a small transformer language model,
synchronised across replicas with TorchFT's DiLoCo every 20 steps (or at
every step, ``--sync per-step``): the "monarch" backend inside each replica,
TorchFT's Manager with ProcessGroupMonarch across replicas, a Lighthouse for
the quorum, and torch_monarch's supervision tree around it. About every 20 s
a failure of another kind hits one worker (kill, segfault, hang, collective
failure, exception); the replica is restarted in place, heals from a donor
and rejoins, while the other replicas keep training.

The demo then runs the same job without failures for the same time, and
reports the failure timeline, goodput, final parameters and losses
(``--out``/summary.json, ``--out``/timeline.png).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional, Sequence

from torch_monarch.demo.config import DemoConfig
from torch_monarch.demo.device import DeviceUnavailableError
from torch_monarch.demo.runner import PhaseResult, PhaseSpec, run_phase
from torch_monarch.launch.backends import BACKENDS
from torch_monarch.launch.inject import InjectionSpec
from torch_monarch.quorum.sync import SYNC_MODES, SyncConfig
from torch_monarch.supervision.drills import DRILLS

__all__ = ["main"]

# The demo's drills (supervision.drills.DRILLS): every kind but "exit", whose
# exit code looks like any other to the supervisor.
DEFAULT_KINDS = ("kill", "segv", "hang", "comm", "exc")
# On GPUs also the GPU-only drills (a CUDA error in the step); "comm" then aborts a collective on CUDA tensors.
GPU_KINDS = DEFAULT_KINDS + tuple(d.kind for d in DRILLS.values() if d.gpu_only)


def _schedule(duration: float, every: float) -> InjectionSpec:
    """Injections every ``every`` seconds, none in the last stretch (time to recover before the stop)."""
    margin = min(15.0, duration / 4)
    if duration - margin < every:
        every = max(1.0, (duration - margin) / 2)
    return InjectionSpec(every=timedelta(seconds=every), until=timedelta(seconds=duration - margin))


def _sync_every(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be >= 1 (inner steps between outer syncs)")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_monarch.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of training measured per run (default 120)")
    p.add_argument("--out", default="./monarch-demo", help="output directory (default ./monarch-demo)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--workers", type=int, default=2, help="workers per replica")
    p.add_argument("--min-replicas", type=int, default=2)
    p.add_argument("--every", type=float, default=20.0, help="seconds between injected failures (default 20)")
    p.add_argument(
        "--kinds", default=None, help=f"failure kinds, in order (default: {','.join(DEFAULT_KINDS)}; on cuda also cuda)"
    )
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="cpu, or cuda: replicas round-robin on the visible GPUs"
    )
    p.add_argument("--seed", type=int, default=1, help="victim selection seed")
    p.add_argument("--status", choices=["live", "log", "none"], default="", help="progress view (default: live on a terminal)")
    p.add_argument(
        "--orchestrator",
        choices=list(BACKENDS),
        default="embedded",
        help="who supervises the replicas: embedded (default) or monarch (real Monarch actors; pip install 'torch_monarch[monarch]')",
    )
    p.add_argument("--sync", choices=list(SYNC_MODES), default="diloco", help="across replicas: diloco (default) or per-step")
    p.add_argument("--sync-every", type=_sync_every, default=20, help="inner steps between DiLoCo's outer syncs (default 20)")
    p.add_argument("--no-baseline", action="store_true", help="skip the failure-free run (no goodput or loss comparison)")
    return p


def _phase_spec(args: argparse.Namespace, name: str, out: Path, inject: Optional[InjectionSpec]) -> PhaseSpec:
    return PhaseSpec(
        name=name,
        run_dir=out / name,
        duration=args.duration,
        replicas=args.replicas,
        workers=args.workers,
        min_replicas=min(args.min_replicas, args.replicas),
        inject=inject,
        status=args.status or ("live" if sys.stdout.isatty() else "log"),
        config=dataclasses.replace(DemoConfig().with_env_overrides(), device=args.device),
        orchestrator=args.orchestrator,
        sync=SyncConfig(mode=args.sync, every=args.sync_every),
    )


def _summarise(args: argparse.Namespace, out: Path, failed: PhaseResult, base: Optional[PhaseResult]) -> dict[str, Any]:
    from torch_monarch.demo.analysis import analyse_failures, eval_final_params, load_run, missed_syncs, participants_per_sync
    from torch_monarch.demo.data import MarkovData
    from torch_monarch.demo.goodput import goodput
    from torch_monarch.demo.model import TinyLM
    from torch_monarch.demo.plot import plot_timeline
    from torch_monarch.demo.report import format_summary, format_timeline, targets_met, write_summary

    cfg = DemoConfig().with_env_overrides()
    inner_per_commit = args.sync_every if args.sync == "diloco" else 1
    data = MarkovData(cfg)
    eval_set = data.eval_set()
    run = load_run(failed.spec.run_dir)
    failures = analyse_failures(run, args.replicas)
    final = eval_final_params(failed.spec.run_dir, eval_set, TinyLM(cfg))
    rejoins = [f.rejoin_s for f in failures if f.rejoin_s is not None]
    summary: dict[str, Any] = {
        "sync": args.sync if args.sync == "per-step" else f"diloco every {args.sync_every} steps",
        "duration_s": round(run.duration_s, 2),
        "replicas": args.replicas,
        "workers_per_replica": args.workers,
        "failures_injected": len(failures),
        "failures_recovered": sum(1 for f in failures if f.recovered),
        "max_healthy_stall_s": max((f.healthy_stall_s for f in failures if f.healthy_stall_s is not None), default=None),
        "max_rejoin_s": max(rejoins, default=None),
        "median_rejoin_s": statistics.median(rejoins) if rejoins else None,
        "max_detection_s": max((f.detection_s for f in failures if f.detection_s is not None), default=None),
        "committed_steps": run.committed_steps(),
        "inner_steps_per_commit": inner_per_commit,
        "participants_per_sync": participants_per_sync(run),
        "healthy_missed_syncs": missed_syncs(run, failures),
        "healthy_retried_syncs": missed_syncs(run, failures, work_kept=True),
        "goodput": goodput(run, args.replicas, failures, inner_per_commit),
        "final_params_identical": bool(final["identical"] and final["replicas"] == args.replicas),
        "final_replicas_saved": final["replicas"],
        "final_steps": final["steps"],
        "final_loss": final["loss"],
        "loss_floor": data.entropy_rate(),
        "run_succeeded": failed.succeeded,
        "load_average": {"with_failures": failed.load_average},
        "failures": [f.to_json() for f in failures],
    }
    if any(not f.recovered for f in failures):
        # an unrecovered failure has no rejoin time: the target fails
        summary["max_rejoin_s"] = summary["median_rejoin_s"] = None
    baseline = None
    if base is not None:
        baseline = load_run(base.spec.run_dir)
        base_final = eval_final_params(base.spec.run_dir, eval_set, TinyLM(cfg))
        summary.update(
            baseline_committed_steps=baseline.committed_steps(),
            # the same measure on the failure-free run: what jitter alone costs
            baseline_goodput=goodput(baseline, args.replicas, [], inner_per_commit),
            baseline_final_loss=base_final["loss"],
            baseline_params_identical=base_final["identical"],
            baseline_succeeded=base.succeeded,
        )
        summary["load_average"]["baseline"] = base.load_average
        plot_timeline(out / "timeline.png", run, baseline, failures, args.replicas, synced_every=inner_per_commit)
    summary["targets"] = targets_met(summary, diloco=args.sync == "diloco")
    write_summary(out / "summary.json", summary)
    print()
    print(format_timeline(failures))
    print()
    print(format_summary(summary))
    print(f"\nwrote {out / 'summary.json'}" + (f" and {out / 'timeline.png'}" if baseline else ""))
    return summary


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.orchestrator == "monarch":
        from torch_monarch.monarch._require import MonarchUnavailableError, require_monarch

        try:
            require_monarch()
        except MonarchUnavailableError as e:
            print(f"torch_monarch demo: {e}", file=sys.stderr)
            return 2
    # SIGTERM unwinds like Ctrl-C, so every phase stops its replicas on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    logging.basicConfig(level=os.environ.get("MONARCH_RUN_LOG_LEVEL", "WARNING"), format="[%(asctime)s %(name)s %(levelname)s] %(message)s")
    os.environ.setdefault("RUST_LOG", "warn")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec = _schedule(args.duration, args.every)
    default_kinds = GPU_KINDS if args.device == "cuda" else DEFAULT_KINDS
    kinds = tuple(k for k in args.kinds.split(",") if k) if args.kinds is not None else default_kinds
    inject = dataclasses.replace(spec, kinds=kinds, seed=args.seed)
    started = time.monotonic()
    print(
        f"torch_monarch demo: {args.replicas} replicas x {args.workers} workers, failures ({', '.join(kinds)}) "
        f"every {inject.every.total_seconds():.0f}s for {args.duration:.0f}s, then the same run without failures. Output: {out}",
        flush=True,
    )
    try:
        failed = run_phase(_phase_spec(args, "with_failures", out, inject))
    except DeviceUnavailableError as e:
        print(f"torch_monarch demo: {e}", file=sys.stderr)
        return 2
    if not failed.window_end:
        print(f"the run with failures did not get going: {failed.message}", file=sys.stderr)
        return 1
    base = None
    if not args.no_baseline:
        print("\nnow the failure-free run of the same length, for comparison", flush=True)
        base = run_phase(_phase_spec(args, "baseline", out, None))
    summary = _summarise(args, out, failed, base)
    print(f"demo took {time.monotonic() - started:.0f}s")
    return 0 if failed.succeeded and summary["failures_recovered"] == summary["failures_injected"] else 1
