"""TorchFT reconfiguration: ProcessGroupMonarch next to torchft's ProcessGroupGloo.

Three measurements, both kinds in the same run, interleaved:

1. ``configure()`` latency at world 2, 4 and 8 (one process per rank), for
   * first:    every rank on a fresh process group (new endpoint);
   * same:     the same members under a new quorum id;
   * replaced: the last rank's process group aborted and replaced by a fresh
               one (a restarted replica), then everyone configures.
   One sample is the slowest rank's configure time; medians over repeats.
   Both kinds run in the same worker processes, alternating which goes first.

2. Survivor stall: four replica groups (one process each) train a small
   model with ``torchft.Manager`` + Lighthouse (min_replicas=2); one replica's
   process is SIGKILLed ("kill") or SIGSTOPped ("stop": hung, as in a
   deadlock or a partition) mid-run; the stall is the time from the signal to
   each survivor's next committed step. Lighthouse settings are the same for
   both kinds; the process-group timeout is each kind's own (Gloo notices a
   hung peer, or a peer that stopped talking to it, only at its timeout;
   monarch at its heartbeat timeout).

3. ``--native`` (torch >= 2.14): c10d's own reconfigure, monarch against
   Gloo, both groups made with ``enable_reconfigure=True`` (identity, shrink
   by one, grow by one, around a killed peer, and threads/fds/RSS over many
   reconfigures; see _native_reconfigure.py). It replaces the configure rows
   of (1) in that run. With ``--stall-kinds monarch-native,gloo-native`` the
   survivor stall of (2) runs TorchFT 0.3's Manager over native groups.

Prints a table, then one line ``JSON {...}``.

    PYTHONPATH=. .venv/bin/python benchmarks/reconfigure.py [--quick]
    PYTHONPATH=. python benchmarks/reconfigure.py --native --stall-modes kill \
        --stall-kinds monarch-native,gloo-native     # torch 2.14 + torchft-nightly
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import WorkerContext, run_workers_ok  # noqa: E402

KINDS = ("monarch", "gloo")
CASES = ("first", "same", "replaced")
CASE_TITLES = {"first": "first configure", "same": "same members, new quorum", "replaced": "one member replaced"}


@dataclass(frozen=True)
class ConfigureBench:
    world_size: int
    repeats: int
    warmup: int = 1
    timeout_s: float = 30.0


STALL_MODES = ("kill", "stop")


@dataclass(frozen=True)
class StallSettings:
    replicas: int = 4
    lighthouse_heartbeat_timeout_ms: int = 1000
    lighthouse_join_timeout_ms: int = 1000
    manager_timeout_s: float = 10.0
    gloo_timeout_s: float = 5.0  # shortest that is safe for configure + ops on a loaded host
    monarch_timeout_s: float = 10.0  # op timeout; a lost peer is found by link/heartbeat, not this
    monarch_heartbeat_s: float = 1.0  # as short as the Lighthouse's heartbeat timeout
    warm_steps: int = 5  # committed steps by every replica before the fault
    # The stall is the longest pause between commits from the fault until this
    # many commits after it (so that the new quorum has taken over).
    commits_after_fault: int = 3


@dataclass
class Report:
    host_cpus: Optional[int]
    load_start: float = 0.0
    load_end: float = 0.0
    # configure[world][kind][case] = list of seconds
    configure: dict[int, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    connections: dict[int, dict[str, int]] = field(default_factory=dict)
    # stall[mode][kind] = list of seconds (one per survivor per repeat)
    stall: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # detect[mode][kind]: fault -> the survivor's step failing (its allreduce raised)
    detect: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    step_s: dict[str, list[float]] = field(default_factory=dict)
    survivor_errors: dict[str, dict[str, list[str]]] = field(default_factory=dict)


# ----------------------------------------------------------------------------- configure latency


def _make_pg(kind: str, timeout_s: float) -> Any:
    if kind == "monarch":
        from torch_monarch.torchft import ProcessGroupMonarch

        return ProcessGroupMonarch(timeout=timedelta(seconds=timeout_s))
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timedelta(seconds=timeout_s))


class _Control:
    """Barriers and result exchange among the ranks over one TCPStore."""

    def __init__(self, ctx: WorkerContext) -> None:
        import torch.distributed as dist

        self.rank = ctx.rank
        self.world = ctx.world_size
        files = dist.FileStore(ctx.init_store_path, ctx.world_size)
        if ctx.rank == 0:
            self._server = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
            files.set("port", str(self._server.port))
        self.port = int(files.get("port"))
        self.store = dist.TCPStore("localhost", self.port, is_master=False, wait_for_workers=False)
        self._barriers = 0

    def barrier(self) -> None:
        self._barriers += 1
        key = f"barrier/{self._barriers}"
        if self.store.add(key, 1) == self.world:
            self.store.set(key + "/open", "1")
        self.store.wait([key + "/open"], timedelta(seconds=120))

    def gather(self, key: str, value: float) -> list[float]:
        """Every rank's value (on rank 0; empty elsewhere)."""
        self.store.set(f"{key}/{self.rank}", repr(value))
        if self.rank != 0:
            return []
        keys = [f"{key}/{r}" for r in range(self.world)]
        self.store.wait(keys, timedelta(seconds=120))
        return [float(self.store.get(k)) for k in keys]


def _configure_worker(ctx: WorkerContext, bench: ConfigureBench) -> Optional[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    control = _Control(ctx)
    replaced = ctx.world_size - 1
    samples: dict[str, dict[str, list[float]]] = {kind: {case: [] for case in CASES} for kind in KINDS}
    connections: dict[str, int] = {}

    def timed_configure(pg: Any, kind: str, repeat: int, case: str, quorum_id: int) -> float:
        control.barrier()
        start = time.perf_counter()
        pg.configure(
            f"localhost:{control.port}/{kind}/{repeat}/{case}", "bench", ctx.rank, ctx.world_size, quorum_id
        )
        return time.perf_counter() - start

    for repeat in range(-bench.warmup, bench.repeats):
        order = KINDS if repeat % 2 == 0 else tuple(reversed(KINDS))
        for kind in order:
            pg = _make_pg(kind, bench.timeout_s)
            times = {"first": timed_configure(pg, kind, repeat, "first", 1)}
            times["same"] = timed_configure(pg, kind, repeat, "same", 2)
            if ctx.rank == replaced:
                # A restarted replica: its old group is gone, a fresh one joins.
                pg.abort()
                pg = _make_pg(kind, bench.timeout_s)
            times["replaced"] = timed_configure(pg, kind, repeat, "replaced", 3)
            if kind == "monarch" and ctx.rank == 0:
                connections["after_replace"] = pg.connection_count()
            # A sanity op on the last group, so that no broken group counts.
            t = torch.ones(4)
            pg.allreduce([t], torch.distributed.ReduceOp.SUM).wait()
            assert t.tolist() == [float(ctx.world_size)] * 4, t
            control.barrier()
            pg.shutdown()
            for case in CASES:
                slowest = control.gather(f"t/{kind}/{repeat}/{case}", times[case])
                if ctx.rank == 0 and repeat >= 0:
                    samples[kind][case].append(max(slowest))
    control.barrier()
    if ctx.rank != 0:
        return None
    return {"samples": samples, "connections": connections}


# ----------------------------------------------------------------------------- survivor stall


# The Manager's group for each kind of the stall measurement: TorchFT process
# groups (0.2's configure), or, with torch >= 2.14 and TorchFT 0.3, native
# groups made with enable_reconfigure=True that the Manager reconfigures from
# handles. Native Gloo rendezvouses through a store every replica shares
# (``shared_port``, served by the parent); monarch needs none.
NATIVE_STALL_KINDS = ("monarch-native", "gloo-native")


def _manager_pg(kind: str, replica: int, lighthouse: str, settings: StallSettings, shared_port: int) -> Any:
    import torch
    import torch.distributed as dist

    if kind == "monarch":
        from torch_monarch.options import Options
        from torch_monarch.torchft import ProcessGroupMonarch

        return ProcessGroupMonarch(
            timeout=timedelta(seconds=settings.monarch_timeout_s),
            options=Options(heartbeat_timeout=settings.monarch_heartbeat_s),
        )
    if kind == "gloo":
        from torchft.process_group import ProcessGroupGloo

        return ProcessGroupGloo(timeout=timedelta(seconds=settings.gloo_timeout_s))
    if kind == "monarch-native":
        from torch_monarch.options import Options

        os.environ["TORCHFT_LIGHTHOUSE"] = lighthouse  # the job whose handles the group accepts
        dist.init_process_group(
            "monarch",
            store=dist.HashStore(),
            rank=0,
            world_size=1,
            timeout=timedelta(seconds=settings.monarch_timeout_s),
            pg_options=Options(heartbeat_timeout=settings.monarch_heartbeat_s),
            enable_reconfigure=True,
        )
        return dist.group.WORLD
    shared = dist.PrefixStore("native", dist.TCPStore("localhost", shared_port, is_master=False, wait_for_workers=False))
    pg = dist.ProcessGroup(shared, replica, settings.replicas)
    backend = dist.ProcessGroupGloo(
        shared, replica, settings.replicas, timeout=timedelta(seconds=settings.gloo_timeout_s), enable_reconfigure=True
    )
    pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
    return pg


def _replica_main(
    kind: str,
    replica: int,
    lighthouse: str,
    settings: StallSettings,
    fault: Optional[str],
    conn: Connection,
    shared_port: int,
) -> None:
    """One replica group (world size 1): trains until the parent kills it.

    With ``fault`` ("kill" or "stop"), at step ``settings.warm_steps`` it sends
    itself SIGKILL or SIGSTOP after its backward pass, once the step's quorum
    (which includes it) is formed and before the gradient allreduce that the
    others then wait in, after telling the parent the time.
    """
    import torch
    import torch.distributed as dist
    from torch import nn, optim
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    pg = _manager_pg(kind, replica, lighthouse, settings, shared_port)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    inner = optim.SGD(model.parameters(), lr=0.01)
    manager = Manager(
        pg=pg,
        min_replica_size=2,
        load_state_dict=lambda state: model.load_state_dict(state["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        replica_id=f"bench_{replica}",
        store_addr="localhost",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        timeout=timedelta(seconds=settings.manager_timeout_s),
        quorum_timeout=timedelta(seconds=60),
        connect_timeout=timedelta(seconds=30),
    )
    optimizer = OptimizerWrapper(manager, inner)
    conn.send(("ready", replica))
    if conn.recv() != "start":
        return
    while True:
        before = manager.current_step()
        optimizer.zero_grad()
        model(torch.rand(16, 32)).pow(2).mean().backward()
        # Gradients averaged by the Manager (torchft.ddp's comm hook in 0.2.0
        # asserts when a peer dies mid-allreduce, whatever the process group).
        if fault is not None and before == settings.warm_steps:
            # In the step, once this replica is in its quorum, before the
            # allreduce: the others' allreduce waits on it.
            manager.wait_quorum()
            conn.send(("fault", replica, time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        works = [manager.allreduce(p.grad) for p in model.parameters()]
        for work in works:
            work.wait()
        error = manager.errored()
        if error is not None:
            cause = error.original_exception
            conn.send(("failed", replica, time.monotonic(), f"{type(cause).__name__}: {cause}"[:200]))
        optimizer.step()
        conn.send(("step", replica, manager.current_step(), manager.current_step() > before, time.monotonic()))


def _stall_once(
    kind: str, mode: str, settings: StallSettings, bound_s: float
) -> tuple[list[float], list[float], list[float], list[str]]:
    """One lost replica: returns (stall per survivor, time to the failed step
    per survivor whose step failed, step times before, survivors' errors)."""
    from torchft.coordination import LighthouseServer

    mp = multiprocessing.get_context("spawn")
    lighthouse = LighthouseServer(
        bind="[::]:0",
        min_replicas=2,
        join_timeout_ms=settings.lighthouse_join_timeout_ms,
        heartbeat_timeout_ms=settings.lighthouse_heartbeat_timeout_ms,
    )
    import torch.distributed as dist

    shared = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    conns: dict[int, Connection] = {}
    processes: dict[int, Any] = {}
    commits: dict[int, list[tuple[int, float]]] = {r: [] for r in range(settings.replicas)}
    errors: dict[int, str] = {}
    faulted: list[float] = []
    failed: dict[int, float] = {}  # first step whose allreduce failed, per replica
    deadline = time.monotonic() + bound_s
    victim = settings.replicas - 1

    def pump(what: str, done: Any) -> None:
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not conns:
                raise RuntimeError(f"{kind}: timed out waiting for {what}; commits {commits}")
            by_id = {id(c): r for r, c in conns.items()}
            for c in wait(list(conns.values()), timeout=remaining):
                replica = by_id[id(c)]
                try:
                    event = c.recv()
                except (EOFError, OSError):  # the process is gone
                    del conns[replica]
                    continue
                if event[0] == "step" and event[3]:
                    commits[replica].append((event[2], event[4]))
                elif event[0] == "fault":
                    faulted.append(event[2])
                elif event[0] == "failed" and replica not in failed:
                    failed[replica] = event[2]
                    errors[replica] = event[3]

    try:
        for replica in range(settings.replicas):
            ours, theirs = mp.Pipe(duplex=True)
            processes[replica] = mp.Process(
                target=_replica_main,
                args=(
                    kind,
                    replica,
                    lighthouse.address(),
                    settings,
                    mode if replica == victim else None,
                    theirs,
                    shared.port,
                ),
                daemon=True,
            )
            processes[replica].start()
            theirs.close()
            conns[replica] = ours
        ready: set[int] = set()
        while len(ready) < settings.replicas:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not wait(list(conns.values()), timeout=remaining):
                raise RuntimeError(f"{kind}: replicas did not start")
            for replica, c in conns.items():
                if c.poll():
                    ready.add(c.recv()[1])
        for c in conns.values():
            c.send("start")
        pump("the fault", lambda: bool(faulted))
        killed = faulted[0]
        survivors = [r for r in range(settings.replicas) if r != victim]
        after = settings.commits_after_fault

        def committed_after(r: int) -> int:
            return sum(1 for _, t in commits[r] if t > killed)

        pump("survivors' commits after the fault", lambda: all(committed_after(r) >= after for r in survivors))
        stalls = [_longest_gap(commits[r], killed, after) for r in survivors]
        detects = [failed[r] - killed for r in survivors if failed.get(r, 0.0) > killed]
        os.kill(processes[victim].pid, signal.SIGKILL)  # a stopped one too
        processes[victim].join(10)
        step_times = []
        for r in survivors:
            before = [t for _, t in commits[r] if t <= killed]
            step_times += [b - a for a, b in zip(before, before[1:])]
        return stalls, detects, step_times, [errors[r] for r in survivors if r in errors]
    finally:
        for process in processes.values():
            if process.exitcode is None:
                process.kill()
        for process in processes.values():
            process.join(10)
        for c in conns.values():
            c.close()
        lighthouse.shutdown()


def _longest_gap(commits: list[tuple[int, float]], fault: float, after: int) -> float:
    """The longest time without a commit from ``fault`` until the ``after``-th commit after it."""
    times = [t for _, t in commits]
    later = [t for t in times if t > fault][:after]
    marks = [fault] + later
    return max(b - a for a, b in zip(marks, marks[1:]))


# ----------------------------------------------------------------------------- report


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


# On this host a new TCP connection now and then waits seconds (a dropped SYN;
# a TCPStore client then takes 5 s), for either kind. Such samples are counted
# and left out of the "typical" median.
CONNECT_STALL_S = 1.0


def _typical_ms(values: Sequence[float]) -> float:
    return _median_ms([v for v in values if v < CONNECT_STALL_S])


def _stalls(values: Sequence[float]) -> int:
    return sum(1 for v in values if v >= CONNECT_STALL_S)


def format_report(report: Report, settings: StallSettings, repeats: int, stall_repeats: int) -> str:
    lines = [
        f"# reconfigure: torch_monarch ProcessGroupMonarch vs torchft ProcessGroupGloo; host_cpus={report.host_cpus} "
        f"load average at start/end {report.load_start:.1f}/{report.load_end:.1f}",
        f"# configure latency: slowest rank, ms, {repeats} interleaved repeats; median of the samples without a "
        f"TCP connect stall (>= {CONNECT_STALL_S:g} s, counted in 'stalls'); speedup = gloo / monarch",
        f"{'world':>5}  {'case':<26}{'monarch ms':>11}{'gloo ms':>10}{'speedup':>9}{'stalls m/g':>12}"
        f"{'all-sample medians m/g':>26}",
    ]
    for world, kinds in sorted(report.configure.items()):
        for case in CASES:
            m, g = kinds["monarch"][case], kinds["gloo"][case]
            monarch, gloo = _typical_ms(m), _typical_ms(g)
            lines.append(
                f"{world:>5}  {CASE_TITLES[case]:<26}{monarch:>11.2f}{gloo:>10.2f}{gloo / monarch:>8.1f}x"
                f"{f'{_stalls(m)}/{_stalls(g)}':>12}{f'{_median_ms(m):.1f}/{_median_ms(g):.1f}':>26}"
            )
    if report.stall:
        lines += [
            "",
            f"# survivor stall: 1 of {settings.replicas} replicas SIGKILLed (kill) or SIGSTOPped (stop) in a step; "
            f"stall = each survivor's longest pause between committed steps from the fault until its "
            f"commit number {settings.commits_after_fault} after it, seconds ({stall_repeats} per mode and kind; lighthouse "
            f"heartbeat/join timeout {settings.lighthouse_heartbeat_timeout_ms}/{settings.lighthouse_join_timeout_ms} ms; "
            f"monarch heartbeat timeout {settings.monarch_heartbeat_s:g} s)",
            "# failed = fault -> the survivor's step fails (its allreduce raised)",
            f"{'mode':<6}{'kind':<9}{'pg timeout':>11}{'failed s':>10}{'stall s':>9}{'max s':>7}  survivors' error",
        ]
        for mode, kinds in report.stall.items():
            for kind, stalls in kinds.items():
                timeout = settings.monarch_timeout_s if kind.startswith("monarch") else settings.gloo_timeout_s
                error = (report.survivor_errors.get(mode, {}).get(kind) or ["-"])[0][:100]
                detects = report.detect.get(mode, {}).get(kind, [])
                detect = f"{statistics.median(detects):.2f}" if detects else "-"
                lines.append(
                    f"{mode:<6}{kind:<9}{timeout:>10.0f}s{detect:>10}{statistics.median(stalls):>9.2f}"
                    f"{max(stalls):>7.2f}  {error}"
                )
            for monarch, gloo in (KINDS, NATIVE_STALL_KINDS):
                if monarch in kinds and gloo in kinds:
                    ratio = statistics.median(kinds[gloo]) / statistics.median(kinds[monarch])
                    lines.append(f"# {mode}: stall ratio {gloo} / {monarch} (medians) {ratio:.1f}x")
        steps = ", ".join(f"{kind} {_median_ms(values):.1f} ms" for kind, values in report.step_s.items())
        lines.append(f"# healthy step time (median): {steps}")
    return "\n".join(lines)


def report_json(report: Report, settings: StallSettings, repeats: int) -> str:
    configure = {
        str(world): {
            case: {
                "monarch_ms": _typical_ms(kinds["monarch"][case]),
                "gloo_ms": _typical_ms(kinds["gloo"][case]),
                "speedup": _typical_ms(kinds["gloo"][case]) / _typical_ms(kinds["monarch"][case]),
                "connect_stalls": {"monarch": _stalls(kinds["monarch"][case]), "gloo": _stalls(kinds["gloo"][case])},
                "all_sample_median_ms": {
                    "monarch": _median_ms(kinds["monarch"][case]),
                    "gloo": _median_ms(kinds["gloo"][case]),
                },
                "monarch_samples_ms": [round(v * 1e3, 3) for v in kinds["monarch"][case]],
                "gloo_samples_ms": [round(v * 1e3, 3) for v in kinds["gloo"][case]],
            }
            for case in CASES
        }
        for world, kinds in report.configure.items()
    }
    stall = {
        mode: {
            kind: {
                "median_s": statistics.median(values),
                "max_s": max(values),
                "samples_s": [round(v, 3) for v in values],
                "failed_samples_s": [round(v, 3) for v in report.detect.get(mode, {}).get(kind, [])],
                "survivor_errors": report.survivor_errors.get(mode, {}).get(kind, [])[:2],
            }
            for kind, values in kinds.items()
        }
        for mode, kinds in report.stall.items()
    }
    steps = {kind: _median_ms(values) for kind, values in report.step_s.items()}
    payload = {
        "benchmark": "reconfigure",
        "host": {
            "cpus": report.host_cpus,
            "load_average": [report.load_start, report.load_end],
            "machine": platform.machine(),
            "python": platform.python_version(),
        },
        "repeats": repeats,
        "configure": configure,
        "monarch_connections_after_replace": {str(w): c for w, c in report.connections.items()},
        "stall": stall,
        "healthy_step_ms": steps,
        "stall_settings": asdict(settings),
    }
    return json.dumps(payload, separators=(",", ":"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", default="2,4,8", help="comma list of world sizes for configure latency")
    parser.add_argument("--repeats", type=int, default=None, help="configure repeats per world (median)")
    parser.add_argument("--stall-repeats", type=int, default=None, help="kills per kind for the stall; 0 skips")
    parser.add_argument("--stall-modes", default="kill,stop", help="comma list of kill,stop")
    parser.add_argument(
        "--stall-kinds", default="monarch,gloo", help=f"comma list of monarch,gloo,{','.join(NATIVE_STALL_KINDS)}"
    )
    parser.add_argument(
        "--native", action="store_true", help="native reconfigure rows (torch >= 2.14), monarch vs gloo; see below"
    )
    parser.add_argument("--native-repeats", type=int, default=None, help="native rows: repeats per world (median)")
    parser.add_argument("--kill-repeats", type=int, default=None, help="native rows: killed-peer runs per kind")
    parser.add_argument("--resource-rounds", type=int, default=100, help="native rows: reconfigures for the resource check")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (about two minutes)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    stall_repeats = args.stall_repeats if args.stall_repeats is not None else (1 if args.quick else 3)
    settings = StallSettings()
    report = Report(host_cpus=os.cpu_count(), load_start=os.getloadavg()[0])
    started = time.monotonic()

    worlds = [int(w) for w in args.worlds.split(",") if w.strip()]
    native: dict[str, Any] = {}
    native_repeats = args.native_repeats or (3 if args.quick else 7)
    kill_repeats = args.kill_repeats if args.kill_repeats is not None else (1 if args.quick else 3)
    if args.native:
        from _native_reconfigure import run as run_native

        native = run_native(
            worlds, native_repeats, kill_repeats, args.resource_rounds, lambda line: print(line, file=sys.stderr, flush=True)
        )
        worlds = []  # the native rows replace the configure rows in this run
    for world in worlds:
        bench = ConfigureBench(world_size=world, repeats=repeats)
        result = run_workers_ok(_configure_worker, world, bench, timeout=600.0)[0]
        report.configure[world] = result["samples"]
        report.connections[world] = result["connections"].get("after_replace", -1)
        print(f"# world {world} done ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    for mode in args.stall_modes.split(","):
        for repeat in range(stall_repeats):
            kinds = args.stall_kinds.split(",")
            for kind in kinds if repeat % 2 == 0 else reversed(kinds):
                stalls, detects, step_times, errors = _stall_once(kind, mode, settings, bound_s=180.0)
                report.stall.setdefault(mode, {}).setdefault(kind, []).extend(stalls)
                report.detect.setdefault(mode, {}).setdefault(kind, []).extend(detects)
                report.step_s.setdefault(kind, []).extend(step_times)
                report.survivor_errors.setdefault(mode, {}).setdefault(kind, []).extend(errors)
                print(f"# stall {mode} {kind}: {[round(s, 3) for s in stalls]} s", file=sys.stderr, flush=True)

    report.load_end = os.getloadavg()[0]
    print(format_report(report, settings, repeats, stall_repeats))
    if native:
        from _native_reconfigure import format_rows

        print("\n".join(format_rows(native, native_repeats, kill_repeats, args.resource_rounds)))
    print(f"# wall time {time.monotonic() - started:.0f} s")
    payload = json.loads(report_json(report, settings, repeats))
    if native:
        payload["native"] = {
            "rows_s": {str(world): kinds for world, kinds in native["rows"].items()},
            "resources": native["resources"],
            "repeats": native_repeats,
            "kill_repeats": kill_repeats,
        }
    print("JSON " + json.dumps(payload, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
