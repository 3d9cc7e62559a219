"""The multi-process harness itself: results and exceptions come back by
rank, and hung or crashed ranks are reported and killed, never leaked."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from multiproc import MultiProcessError, WorkerContext, run_workers, run_workers_ok


def behave_worker(ctx: WorkerContext, behaviours: dict[int, str]) -> int:
    """Rank r does behaviours[r]: "ok", "raise", "hang", "crash"; reports its pid."""
    behaviour = behaviours.get(ctx.rank, "ok")
    if behaviour == "raise":
        raise KeyError(f"rank {ctx.rank} raised on purpose")
    if behaviour == "hang":
        threading.Event().wait()
    if behaviour == "announce_and_hang":
        # One write of the whole line: both ranks share the parent's stdout pipe,
        # and print() writes the text and its newline separately.
        os.write(1, f"RANK_PID {os.getpid()}\n".encode())
        threading.Event().wait()
    if behaviour == "crash":
        os._exit(7)
    return os.getpid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie would still answer; run_workers reaps, so none should remain.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_values_come_back_by_rank() -> None:
    pids = run_workers_ok(behave_worker, 3, {})
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert not any(_alive(pid) for pid in pids)


def test_failures_are_reported_and_every_child_reaped() -> None:
    behaviours = {0: "ok", 1: "raise", 2: "hang", 3: "crash"}
    results = run_workers(behave_worker, 4, behaviours, timeout=10)
    assert results[0].ok and isinstance(results[0].value, int)
    error = results[1].error
    assert error is not None and error.is_a("KeyError") and error.is_a("LookupError")
    assert "raised on purpose" in error.message and "behave_worker" in error.traceback
    assert results[2].problem is not None and "did not report" in results[2].problem
    assert results[3].problem is not None and "without reporting" in results[3].problem
    assert results[3].exit_code == 7
    assert results[2].exit_code is not None, "the hung rank must be killed and reaped"
    assert not _alive(results[0].value)
    with pytest.raises(MultiProcessError, match="raised on purpose"):
        run_workers_ok(behave_worker, 2, {1: "raise"})


def test_the_time_bound_starts_after_start_up() -> None:
    """Four ranks importing torch at once take seconds on a loaded machine;
    a bound shorter than that still holds, because it starts after start-up."""
    pids = run_workers_ok(behave_worker, 4, {}, timeout=2)
    assert len(set(pids)) == 4


def test_ranks_not_waited_for_are_killed() -> None:
    results = run_workers(behave_worker, 3, {2: "hang"}, timeout=60, wait_for={0, 1}, stay_alive=True)
    assert results[0].ok and results[1].ok
    assert results[2].problem is not None and "not waited for" in results[2].problem
    assert all(result.exit_code == -signal.SIGKILL for result in results), [r.exit_code for r in results]


ORPHAN_PARENT = """
import sys
from multiproc import run_workers
import test_harness

if __name__ == "__main__":
    run_workers(test_harness.behave_worker, 2, {0: "announce_and_hang", 1: "announce_and_hang"}, timeout=120)
"""


def _await_exits(pids: list[int], timeout: float) -> list[int]:
    """Waits until the processes exit (child of ours or not); returns those still alive."""
    pidfds = {os.pidfd_open(pid): pid for pid in pids}  # readable once the process exits
    deadline = time.monotonic() + timeout
    try:
        while pidfds and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pidfds), [], [], deadline - time.monotonic())
            for fd in ready:
                os.close(fd)
                del pidfds[fd]
        return list(pidfds.values())
    finally:
        for fd in pidfds:
            os.close(fd)


def test_ranks_die_with_a_killed_parent() -> None:
    """Even when the parent is killed outright (no cleanup runs), the ranks go."""
    test_dir = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(test_dir.parent), str(test_dir), str(test_dir / "support")]))
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_PARENT], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pids: list[int] = []
    survivors = pids
    try:
        assert parent.stdout is not None
        for line in parent.stdout:
            if line.startswith("RANK_PID "):
                pids.append(int(line.split()[1]))
            if len(pids) == 2:
                break
        assert len(pids) == 2, "the ranks did not start"
        parent.kill()
        parent.wait()
        survivors = _await_exits(pids, timeout=30)
        assert not survivors, f"ranks {survivors} outlived their killed parent"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
        for pid in survivors:  # only when the test failed: leave nothing behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
