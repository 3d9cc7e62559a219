"""GPU workers fork from a preloaded, CUDA-clean server (monarch-run's default on a GPU host).

Each worker records, before it touches the GPU, who its parent is, what it
found already imported, and whether it inherited any CUDA state (torch's
flag for a child of a process that had initialised CUDA, and the driver's
own answer); then it computes on the GPU. Rank 0 of the first attempt exits
with an error, so the restarted workers are checked the same way.
A preload module that initialises CUDA (``torch.cuda.init()``) is refused,
naming it; one that only asks ``torch.cuda.is_available()`` at import (as
TorchTitan does) is not, and its workers use the GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from commands import repo_env, run_bounded

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(240)]

_WORKER = """
import json, os, sys
preloaded = sorted(m for m in ("torch", "torch_monarch", "torchft") if m in sys.modules)
import torch
from torch_monarch.supervision.cuda_clean import cuda_initialized

attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
parent = os.getppid()
record = {
    "pid": os.getpid(),
    "parent": parent,
    "parent_cmdline": open(f"/proc/{parent}/cmdline").read().replace("\\0", " "),
    "preloaded": preloaded,
    "bad_fork": torch.cuda._is_in_bad_fork(),
    "inherited_cuda": cuda_initialized(),
}
torch.cuda.set_device(0)
record["value"] = torch.arange(4, device="cuda", dtype=torch.float32).sum().item()
with open(os.path.join(sys.argv[1], f"{attempt}_{rank}.json"), "w") as f:
    json.dump(record, f)
if attempt == 0 and rank == 0:
    sys.exit(17)
"""


def _run(tmp_path: Path, name: str, flags: list[str]) -> tuple[Any, Path, Path]:
    root = tmp_path / name
    records = root / "records"
    records.mkdir(parents=True)
    (root / "modules").mkdir()
    (root / "modules" / "asks_is_available.py").write_text("import torch\nASSUMED = torch.cuda.is_available()\n")
    (root / "modules" / "initialises_cuda.py").write_text("import torch\ntorch.cuda.init()\n")
    script = root / "worker.py"
    script.write_text(_WORKER)
    env = repo_env()
    env["PYTHONPATH"] = f"{root / 'modules'}:{env['PYTHONPATH']}"
    command = [sys.executable, "-m", "torch_monarch.run", "--nproc-per-node", "2", "--max-restarts", "2",
               "--restart-backoff", "0", "--run-dir", str(root / "run"), *flags, str(script), str(records)]  # fmt: skip
    result = run_bounded(command, 180, env)
    print(result.stdout[-4000:])
    return result, records, root / "run"


def _forkserver_pid(run_dir: Path) -> int:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    ready = [e for e in events if e["event"] == "forkserver_ready"]
    assert len(ready) == 1, events
    return int(ready[0]["pid"])


@pytest.mark.parametrize("flags", [[], ["--preload", "asks_is_available"]], ids=["default", "is_available-at-import"])
def test_gpu_workers_and_restarts_fork_from_a_cuda_clean_server(tmp_path: Path, flags: list[str]) -> None:
    result, records, run_dir = _run(tmp_path, "run", flags)
    assert result.returncode == 0, result.stdout[-3000:]
    server = _forkserver_pid(run_dir)
    found = {path.stem: json.loads(path.read_text()) for path in records.glob("*.json")}
    assert set(found) == {"0_0", "0_1", "1_0", "1_1"}, found  # both attempts, both ranks
    for name, record in found.items():
        assert record["parent"] == server, (name, record)
        assert "multiprocessing.forkserver" in record["parent_cmdline"], record
        assert record["preloaded"] == ["torch", "torch_monarch", "torchft"], record
        assert record["bad_fork"] is False and record["inherited_cuda"] == "", record
        assert record["value"] == 6.0, record
    assert len({record["pid"] for record in found.values()}) == 4


def test_a_preload_that_initialises_cuda_is_refused_naming_it(tmp_path: Path) -> None:
    result, records, _ = _run(tmp_path, "refused", ["--preload", "asks_is_available,initialises_cuda"])
    assert result.returncode != 0
    assert "preload module 'initialises_cuda' initialised CUDA: torch initialised CUDA" in result.stdout, result.stdout[-3000:]
    assert not list(records.iterdir())  # no worker ran
