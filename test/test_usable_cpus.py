"""The CPUs a group counts when it picks its default threads: the process's
affinity mask, capped by its cgroup's CPU quota, which is how a container's
CPU limit (Kubernetes, ``docker --cpus``) is set. A container that may use 2
CPUs of a 64-core host must not start threads as if it had 64.
"""

from __future__ import annotations

import math
import os
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
import torch
import torch.distributed as dist

import torch_monarch
from torch_monarch import _C
from multiproc import WorkerContext, run_workers_ok


def _v1_limit(directory: Path, quota_us: int, period_us: int = 100_000) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period_us}\n")


def _v2_limit(directory: Path, cpu_max: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.max").write_text(cpu_max + "\n")


def _v1_mount(mount_point: str, root: str = "/", options: str = "rw,cpu,cpuacct") -> str:
    return f"35 25 0:30 {root} {mount_point} rw,nosuid,nodev shared:9 - cgroup cgroup {options}\n"


def _v2_mount(mount_point: str, root: str = "/") -> str:
    return f"30 25 0:26 {root} {mount_point} rw,nosuid,nodev shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_v1_takes_the_tightest_quota_from_the_cgroup_up(tmp_path: Path) -> None:
    mount = tmp_path / "cpu,cpuacct"
    _v1_limit(mount, -1)
    _v1_limit(mount / "job", 300_000)
    _v1_limit(mount / "job" / "step", 150_000)
    cgroup = "12:memory:/job/step\n4:cpu,cpuacct:/job/step\n0::/job/step\n"
    assert _C.cgroup_cpu_limit(cgroup, _v1_mount(str(mount))) == pytest.approx(1.5)
    # A parent's limit binds where it is the tighter one.
    _v1_limit(mount / "job", 100_000, 200_000)
    assert _C.cgroup_cpu_limit(cgroup, _v1_mount(str(mount))) == pytest.approx(0.5)


def test_v2_cpu_max_and_max_meaning_none(tmp_path: Path) -> None:
    mount = tmp_path / "unified"
    _v2_limit(mount / "pod", "400000 100000")
    _v2_limit(mount / "pod" / "worker", "max 100000")
    cgroup = "0::/pod/worker\n"
    assert _C.cgroup_cpu_limit(cgroup, _v2_mount(str(mount))) == pytest.approx(4.0)
    _v2_limit(mount / "pod", "max 100000")
    assert _C.cgroup_cpu_limit(cgroup, _v2_mount(str(mount))) is None


def test_both_hierarchies_and_the_tighter_wins(tmp_path: Path) -> None:
    v1 = tmp_path / "cpu"
    v2 = tmp_path / "unified"
    _v1_limit(v1 / "a", 250_000)
    _v2_limit(v2 / "a", "300000 100000")
    cgroup = "1:cpu:/a\n0::/a\n"
    assert _C.cgroup_cpu_limit(cgroup, _v1_mount(str(v1), options="rw,cpu") + _v2_mount(str(v2))) == pytest.approx(2.5)


def test_container_mount_shows_its_own_cgroup_at_the_top(tmp_path: Path) -> None:
    # Without a cgroup namespace the container sees the host's path for its
    # cgroup, and its mount's root is that cgroup.
    mount = tmp_path / "cgroup"
    _v2_limit(mount, "50000 100000")
    cgroup = "0::/docker/0123abcd\n"
    assert _C.cgroup_cpu_limit(cgroup, _v2_mount(str(mount), root="/docker/0123abcd")) == pytest.approx(0.5)


def test_mount_point_with_a_space(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup root"
    _v2_limit(mount / "a", "200000 100000")
    escaped = str(mount).replace(" ", "\\040")
    assert _C.cgroup_cpu_limit("0::/a\n", _v2_mount(escaped)) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "cgroup, mountinfo_for",
    [
        ("4:memory:/a\n", lambda mount: _v1_mount(mount, options="rw,memory")),  # no cpu controller
        ("4:cpu:/a\n", lambda mount: ""),  # the hierarchy is not mounted here
        ("garbage\n\n", lambda mount: "not a mountinfo line\n"),
    ],
)
def test_no_limit(tmp_path: Path, cgroup: str, mountinfo_for: Callable[[str], str]) -> None:
    mount = tmp_path / "cg"
    _v1_limit(mount / "a", 100_000)
    assert _C.cgroup_cpu_limit(cgroup, mountinfo_for(str(mount))) is None


def test_usable_cpus_is_the_affinity_capped_by_this_process_quota() -> None:
    limit = _C.cgroup_cpu_limit(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    affinity = len(os.sched_getaffinity(0))
    expected = affinity if limit is None else max(1, min(affinity, math.ceil(limit)))
    assert _C.usable_cpus() == expected


def _cpu_controller_dir() -> Optional[Path]:
    """A cgroup directory with the cpu controller where a child may be made, or None."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        after = fields[fields.index("-") + 1 :]
        mount = Path(fields[4])
        if after[0] == "cgroup" and "cpu" in after[2].split(","):
            candidate = mount
        elif after[0] == "cgroup2" and "cpu" in (mount / "cgroup.subtree_control").read_text().split():
            candidate = mount
        else:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    return None


@pytest.fixture
def one_cpu_cgroup() -> Iterator[Path]:
    """A new cgroup limited to one CPU that processes can be moved into; removed afterwards."""
    parent = _cpu_controller_dir()
    if parent is None:
        pytest.skip("no writable cgroup with the cpu controller (needs root and a cgroup mount)")
    cgroup = parent / f"torch_monarch_test_{uuid.uuid4().hex[:8]}"
    problem = ""
    try:
        cgroup.mkdir()
        if (cgroup / "cpu.max").exists():
            (cgroup / "cpu.max").write_text("100000 100000\n")
        else:
            (cgroup / "cpu.cfs_period_us").write_text("100000\n")
            (cgroup / "cpu.cfs_quota_us").write_text("100000\n")
        # Whether a process may be moved in here (a container may refuse).
        probe = subprocess.Popen(["sleep", "30"])
        try:
            (cgroup / "cgroup.procs").write_text(f"{probe.pid}\n")
        finally:
            probe.kill()
            probe.wait()
    except OSError as error:
        problem = f"cannot use a cgroup under {parent}: {error}"
    if not problem:
        yield cgroup
    if cgroup.exists():
        cgroup.rmdir()
    if problem:
        pytest.skip(problem)


def quota_worker(ctx: WorkerContext, cgroup: str) -> tuple[int, int, int]:
    Path(cgroup, "cgroup.procs").write_text(f"{os.getpid()}\n")
    torch.set_num_threads(1)
    ctx.init("monarch")
    group = dist.new_group(backend="monarch", pg_options=torch_monarch.Options())
    return _C.usable_cpus(), len(os.sched_getaffinity(0)), torch_monarch.backend_of(group).threads


def test_a_group_in_a_one_cpu_cgroup_keeps_one_thread(one_cpu_cgroup: Path) -> None:
    # One rank on its host: outside the cgroup it takes two threads wherever
    # it may run on two CPUs (test_helper_threads.py).
    [(usable, affinity, threads)] = run_workers_ok(quota_worker, 1, str(one_cpu_cgroup))
    assert usable == 1, f"usable_cpus() {usable} in a one-CPU cgroup (affinity {affinity})"
    assert threads == 1, f"a group in a one-CPU cgroup took {threads} threads"
