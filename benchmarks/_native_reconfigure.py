"""Native c10d reconfigure (torch >= 2.14): monarch against Gloo, both groups
made with ``enable_reconfigure=True`` and reconfigured from handles through
``dist._reconfigure``, in the same worker processes, interleaved.

Rows, for each world size:

* identity: the same members under a fresh uuid;
* shrink:   the last member left out (it sits the round out);
* grow:     it comes back;
* killed:   the last member SIGKILLs itself; the survivors reconfigure
            around it and all_reduce; measured from the kill (its own
            processes, one kind per run, the kinds alternating).

One sample is the slowest rank's time; medians over repeats. The resource
check reconfigures a monarch group N times (everyone, then all but the last,
alternately) and reports the process's threads, fds and RSS before and after.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from _harness import WorkerContext, run_workers, run_workers_ok

KINDS = ("monarch", "gloo")
CASES = ("identity", "shrink", "grow")
TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True)
class NativeBench:
    world_size: int
    repeats: int
    warmup: int = 1


class _Control:
    """Barriers, handle exchange and result gathering over a TCPStore that rank 0
    hosts. Not the run's FileStore: its wait polls every 10 ms, so ranks left a
    barrier up to 10 ms apart, and the first to start a reconfigure waited that
    long for the last (the ~10 ms every multi-member row used to show)."""

    def __init__(self, ctx: WorkerContext) -> None:
        import torch.distributed as dist

        self.rank = ctx.rank
        self.world = ctx.world_size
        meeting = dist.FileStore(ctx.aux_store_path, ctx.world_size)
        if ctx.rank == 0:
            self.store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
            meeting.set("control_port", str(self.store.port))
        else:
            meeting.wait(["control_port"], TIMEOUT)
            port = int(meeting.get("control_port"))
            self.store = dist.TCPStore("localhost", port, is_master=False, wait_for_workers=False, timeout=TIMEOUT)
        self._rounds = 0

    def _key(self, name: str) -> str:
        self._rounds += 1
        return f"{self._rounds}/{name}"

    def exchange(self, name: str, value: str) -> list[str]:
        key = self._key(name)
        self.store.set(f"{key}/{self.rank}", value)
        keys = [f"{key}/{rank}" for rank in range(self.world)]
        self.store.wait(keys, TIMEOUT)
        return [self.store.get(k).decode() for k in keys]

    def barrier(self) -> None:
        self.exchange("barrier", "1")

    def slowest(self, name: str, seconds: Optional[float]) -> float:
        values = self.exchange(name, "" if seconds is None else repr(seconds))
        return max(float(v) for v in values if v)


def _reconfigure(group: Any, uuid: int, handles: list[str]) -> float:
    import torch.distributed as dist

    start = time.perf_counter()
    dist._reconfigure(uuid, handles, group=group, timeout=TIMEOUT).wait()
    return time.perf_counter() - start


def _check_sum(group: Any, members: int) -> None:
    import torch

    tensor = torch.ones(4)
    group.allreduce([tensor]).wait()
    assert tensor.tolist() == [float(members)] * 4, tensor


def _new_groups(ctx: WorkerContext) -> dict[str, Any]:
    """A reconfigurable group of each kind over the run's store. torch 2.14's
    new_group has no enable_reconfigure: monarch takes it from its Options,
    Gloo's backend is made as TorchFT's tests make it."""
    import torch
    import torch.distributed as dist

    from torch_monarch import Options

    torch.set_num_threads(1)
    store = dist.FileStore(ctx.init_store_path, ctx.world_size)
    dist.init_process_group("gloo", store=store, rank=ctx.rank, world_size=ctx.world_size)
    monarch = dist.new_group(backend="monarch", timeout=TIMEOUT, pg_options=Options(enable_reconfigure=True))
    shared = dist.PrefixStore("native_gloo", store)
    gloo = dist.ProcessGroup(shared, ctx.rank, ctx.world_size)
    backend = dist.ProcessGroupGloo(shared, ctx.rank, ctx.world_size, timeout=TIMEOUT, enable_reconfigure=True)
    gloo._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    gloo._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
    return {"monarch": monarch, "gloo": gloo}


def native_worker(ctx: WorkerContext, bench: NativeBench) -> Optional[dict[str, dict[str, list[float]]]]:
    import torch.distributed as dist

    control = _Control(ctx)
    groups = _new_groups(ctx)

    def handles(kind: str) -> list[str]:
        # Asked anew before every reconfigure, untimed: Gloo's changes with its communicator.
        return control.exchange(kind, dist._get_reconfigure_handle(groups[kind]))

    last = ctx.world_size - 1
    uuid = 0
    samples: dict[str, dict[str, list[float]]] = {kind: {case: [] for case in CASES} for kind in KINDS}
    for kind in KINDS:  # formed once before any row is timed
        uuid += 1
        _reconfigure(groups[kind], uuid, handles(kind))
    for repeat in range(-bench.warmup, bench.repeats):
        for kind in KINDS if repeat % 2 == 0 else tuple(reversed(KINDS)):
            group = groups[kind]
            for case, size in (("identity", ctx.world_size), ("shrink", last), ("grow", ctx.world_size)):
                uuid += 1
                round_members = handles(kind)[:size]
                control.barrier()
                took = _reconfigure(group, uuid, round_members) if ctx.rank < len(round_members) else None
                if took is not None:
                    _check_sum(group, len(round_members))
                slowest = control.slowest(f"{kind}/{case}", took)
                if repeat >= 0:
                    samples[kind][case].append(slowest)
    control.barrier()
    dist.destroy_process_group()
    return samples if ctx.rank == 0 else None


def killed_worker(ctx: WorkerContext, kind: str) -> Optional[float]:
    """The last rank SIGKILLs itself; the survivors reconfigure around it and
    all_reduce. Returns each survivor's time from the kill (wall clock, the
    same on every process of this host)."""
    import torch
    import torch.distributed as dist

    import torch_monarch  # noqa: F401 - registers "monarch"

    torch.set_num_threads(1)
    control = _Control(ctx)
    dist.init_process_group(
        kind,
        store=dist.FileStore(ctx.init_store_path, ctx.world_size),
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=TIMEOUT,
        enable_reconfigure=True,
    )
    _reconfigure(None, 1, control.exchange("handles", dist._get_reconfigure_handle()))
    _check_sum(dist.group.WORLD, ctx.world_size)
    handles = control.exchange("formed", dist._get_reconfigure_handle())
    victim = ctx.world_size - 1
    if ctx.rank == victim:
        control.store.set("killed_at", repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    control.store.wait(["killed_at"], TIMEOUT)
    killed_at = float(control.store.get("killed_at"))
    _reconfigure(None, 2, handles[:victim])
    _check_sum(dist.group.WORLD, victim)
    return time.time() - killed_at


def killed_sample(kind: str, world: int) -> float:
    """The slowest survivor's time from the kill to its all_reduce on the new group."""
    results = run_workers(killed_worker, world, kind, wait_for=range(world - 1), stay_alive=True, timeout=300.0)
    survivors = results[: world - 1]
    for result in survivors:
        if not result.ok:
            raise RuntimeError(f"{kind} world {world} rank {result.rank}: {result.problem or result.error}")
    return max(result.value for result in survivors)


def resources_worker(ctx: WorkerContext, rounds: int) -> Optional[dict[str, tuple[int, int]]]:
    """Threads, fds and RSS (KiB) of rank 0 before and after `rounds` reconfigures."""
    import torch.distributed as dist

    control = _Control(ctx)
    group = _new_groups(ctx)["monarch"]
    handles = control.exchange("handles", dist._get_reconfigure_handle(group))

    def usage() -> tuple[int, int, int]:
        with open("/proc/self/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd")), rss

    def round_of(uuid: int) -> None:
        members = handles if uuid % 2 == 0 else handles[:-1]
        if ctx.rank < len(members):
            _reconfigure(group, uuid, members)
            _check_sum(group, len(members))
        control.barrier()

    for uuid in range(1, 5):  # what the endpoint keeps for good is counted after these
        round_of(uuid)
    before = usage()
    for uuid in range(5, 5 + rounds):
        round_of(uuid)
    after = usage()
    dist.destroy_process_group()
    if ctx.rank != 0:
        return None
    return {name: (b, a) for name, b, a in zip(("threads", "fds", "rss_kib"), before, after)}


def run(worlds: list[int], repeats: int, kill_repeats: int, rounds: int, log: Any) -> dict[str, Any]:
    """Every row, as {"rows": {world: {kind: {case: [seconds]}}}, "resources": ...}."""
    rows: dict[int, dict[str, dict[str, list[float]]]] = {}
    for world in worlds:
        rows[world] = run_workers_ok(native_worker, world, NativeBench(world, repeats), timeout=900.0)[0]
        for repeat in range(kill_repeats):
            for kind in KINDS if repeat % 2 == 0 else tuple(reversed(KINDS)):
                rows[world][kind].setdefault("killed", []).append(killed_sample(kind, world))
        log(f"# native world {world} done")
    resources = run_workers_ok(resources_worker, 3, rounds, timeout=900.0)[0] if rounds else {}
    return {"rows": rows, "resources": resources}


def format_rows(result: dict[str, Any], repeats: int, kill_repeats: int, rounds: int) -> list[str]:
    lines = [
        "",
        f"# native reconfigure (dist._reconfigure, enable_reconfigure=True), torch >= 2.14: slowest rank, ms, median of "
        f"{repeats} interleaved repeats ({kill_repeats} for 'killed peer', timed from the SIGKILL to the survivors' "
        "all_reduce on the new group); ratio = gloo / monarch",
        f"{'world':>5}  {'case':<16}{'monarch ms':>11}{'gloo ms':>10}{'ratio':>8}",
    ]
    titles = {"identity": "identity", "shrink": "shrink by one", "grow": "grow by one", "killed": "killed peer"}
    for world, kinds in sorted(result["rows"].items()):
        for case in (*CASES, "killed"):
            if case not in kinds["monarch"]:
                continue
            monarch = statistics.median(kinds["monarch"][case]) * 1e3
            gloo = statistics.median(kinds["gloo"][case]) * 1e3
            lines.append(f"{world:>5}  {titles[case]:<16}{monarch:>11.2f}{gloo:>10.2f}{gloo / monarch:>7.1f}x")
    if result["resources"]:
        usage = ", ".join(f"{name} {before} -> {after}" for name, (before, after) in result["resources"].items())
        lines.append(f"# monarch over {rounds} reconfigures (world 3, everyone / all but the last): {usage}")
    return lines
