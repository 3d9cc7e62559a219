"""Worker-side helpers shared by the fault-injection suites (test_faults_*.py,
test_abort.py, test_timeout.py, test_shrink.py, test_trust.py).

Times are ``time.monotonic()``: CLOCK_MONOTONIC is one clock for every
process of the host, so a survivor can measure its detection latency from a
timestamp the victim (or the killer) wrote in another process.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Optional, Sequence

from multiproc import RankResult

__all__ = [
    "C10D_TIMEOUT_PATTERN",
    "Outcome",
    "Resources",
    "assert_no_problems",
    "attempt",
    "backend_of",
    "kill_and_wait",
    "process_state",
    "read_stamp",
    "resources",
    "settled_baseline",
    "signal_self",
    "teardown_leaks",
    "wait_for_state",
    "wait_until",
]

# How c10d's own tests and tools recognise a timeout in an error message.
C10D_TIMEOUT_PATTERN = r" (Timed out|closed|timeout) "


@dataclass(frozen=True)
class Outcome:
    """What one call did on one rank."""

    ok: bool
    class_names: tuple[str, ...] = ()
    failed_ranks: tuple[int, ...] = ()
    message: str = ""
    started: float = 0.0
    ended: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return self.ended - self.started

    def is_a(self, class_name: str) -> bool:
        return class_name in self.class_names

    def describe(self) -> str:
        if self.ok:
            return f"returned after {self.elapsed_s:.3f} s"
        return (
            f"raised {self.class_names[0]}(failed_ranks={list(self.failed_ranks)}) after "
            f"{self.elapsed_s:.3f} s: {self.message[:400]}"
        )


def attempt(call: Callable[[], object]) -> Outcome:
    """Runs ``call`` and records whether and what it raised, and when."""
    started = time.monotonic()
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the caller judges the type
        ended = time.monotonic()
        return Outcome(
            ok=False,
            class_names=tuple(cls.__name__ for cls in type(error).__mro__),
            failed_ranks=tuple(getattr(error, "failed_ranks", ()) or ()),
            message=str(error),
            started=started,
            ended=ended,
        )
    return Outcome(ok=True, started=started, ended=time.monotonic())


def backend_of(group: Any) -> Any:
    """The ``torch_monarch._C.MonarchBackend`` behind a c10d ProcessGroup."""
    import torch

    return group._get_backend(torch.device("cpu"))


# ---------------------------------------------------------------------------
# Injecting faults and watching processes
# ---------------------------------------------------------------------------


def signal_self(sig: signal.Signals, stamp_path: str) -> None:
    """Writes the time to ``stamp_path``, then sends ``sig`` to this process.

    The stamp is written first so that whoever measures from it counts the
    (tiny) delivery delay against the system under test, never in its favour.
    """
    fd = os.open(stamp_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, repr(time.monotonic()).encode())
    finally:
        os.close(fd)
    os.rename(stamp_path + ".tmp", stamp_path)  # readers never see half a stamp
    os.kill(os.getpid(), sig)


def read_stamp(stamp_path: str) -> float:
    with open(stamp_path) as f:
        return float(f.read())


def process_state(pid: int) -> Optional[str]:
    """The state letter of /proc/<pid>/stat (R, S, T, Z, ...); None once reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may hold spaces and parentheses: the state follows the last ')'.
    return stat[stat.rindex(")") + 2]


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Polls ``predicate`` (every millisecond) until it holds; returns the time
    it was first seen to hold. For external events whose timing is what is
    measured or awaited, never as a stand-in for synchronisation."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.001)


def wait_for_state(pid: int, states: Iterable[Optional[str]], timeout_s: float) -> float:
    """Waits until process ``pid`` is in one of ``states`` (None: reaped)."""
    wanted = set(states)
    return wait_until(lambda: process_state(pid) in wanted, timeout_s, f"pid {pid} to reach state {sorted(map(str, wanted))}")


def kill_and_wait(pid: int, timeout_s: float = 10.0) -> float:
    """SIGKILLs ``pid`` (also when stopped) and returns when it is dead: a
    zombie (its sockets are closed by then) or gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return time.monotonic()
    return wait_for_state(pid, ("Z", "X", None), timeout_s)


# ---------------------------------------------------------------------------
# Leak accounting
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """What a process holds that a torn-down group must give back."""

    threads: int
    fds: int
    shm_mappings: int
    rdma_endpoints: int
    rdma_registrations: int

    def leaks_since(self, baseline: "Resources") -> list[str]:
        leaks = []
        for name in ("threads", "fds", "shm_mappings", "rdma_endpoints", "rdma_registrations"):
            now, before = getattr(self, name), getattr(baseline, name)
            if now > before:
                leaks.append(f"{name}: {before} before init, {now} after destroy_process_group")
        return leaks


def _shm_mappings() -> int:
    # The blocks of this process's own pooled tensors (allocate_tensor) stay
    # mapped for reuse as long as it runs, by design; the peers' are counted.
    own_pool = f"/dev/shm/monarch-{os.getpid()}-pool-"
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if "/dev/shm/" in line and own_pool not in line)


def resources() -> Resources:
    from torch_monarch import _C

    rdma = _C.rdma_resources()
    return Resources(
        threads=len(os.listdir("/proc/self/task")),
        fds=len(os.listdir("/proc/self/fd")),
        shm_mappings=_shm_mappings(),
        rdma_endpoints=rdma["endpoints"],
        rdma_registrations=rdma["registrations"],
    )


def settled_baseline() -> Resources:
    """Resource counts after ``import torch_monarch`` (and its extension) and
    some torch work, so that threads torch starts lazily are already counted.
    Take it before the first group is created."""
    import torch

    import torch_monarch  # noqa: F401 - registers the backend
    from torch_monarch import _C  # noqa: F401 - the extension is loaded lazily otherwise

    x = torch.arange(4096, dtype=torch.float32)
    (x * 2).sum().item()
    gc.collect()
    return resources()


def teardown_leaks(baseline: Resources) -> list[str]:
    """Destroys every process group and reports what outlived it.

    The caller must hold no reference to a group or backend any more: a
    backend's sockets close when its last reference goes.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
    return resources().leaks_since(baseline)


def assert_no_problems(results: Sequence[RankResult], skip: Collection[int] = ()) -> list[dict[str, Any]]:
    """Judges a run of fault workers, each returning a dict with a "problems"
    list: every rank but those in ``skip`` (victims) must have reported, with
    no problem. Returns the reports of the judged ranks, by rank."""
    failures: list[str] = []
    reports: list[dict[str, Any]] = []
    for result in results:
        if result.rank in skip:
            continue
        if not result.ok:
            failures.append(f"rank {result.rank}: {result.problem} {result.error.traceback if result.error else ''}")
            continue
        failures += [f"rank {result.rank}: {problem}" for problem in result.value["problems"]]
        reports.append(result.value)
    assert not failures, "\n".join(failures)
    return reports
