"""DiLoCo across replicas under both orchestrators (``monarch-run --sync diloco``, embedded and Monarch).

Two replica groups of one worker train with TorchFT's DiLoCo over
ProcessGroupMonarch (``test/scripts/diloco_steps.py``); one replica is killed
(SIGKILL) during its inner steps, or inside an outer sync after it sent part
of its pseudo-gradients. The survivor's outer sync completes or is retried
(never hangs), the killed replica is restarted, heals from the survivor with
the inner and outer optimizer state and DiLoCo's global weights, and both
end with identical parameters. A sync that failed is retried with the
interval's local weights kept. Also: bad ``--sync``/``--sync-every`` input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from multiproc import WorkerContext, run_workers_ok
from test_run_cli import events, monarch_run

from torch_monarch.demo.fault_tolerance import main as demo_main
from torch_monarch.launch.args import parse_args, sync_env
from torch_monarch.quorum import SyncConfig
from torch_monarch.quorum.sync import broadcast_replica_state, optimizer_tensors

SCRIPT = Path(__file__).resolve().parent / "scripts" / "diloco_steps.py"
OUTER_STEPS = 5


def _syncs(run_dir: Path, replica: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / f"diloco_{replica}.jsonl").read_text().splitlines() if line.strip()]


def _run_with_kill(run_dir: Path, where: str, orchestrator: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    result = monarch_run(
        "--orchestrator", orchestrator, "--replicas", "2", "--nproc-per-node", "1", "--min-replicas", "2", "--max-restarts", "2",
        "--restart-backoff", "0", "--sync", "diloco", "--sync-every", "4", "--run-dir", str(run_dir),
        str(SCRIPT), "--outer-steps", str(OUTER_STEPS), "--kill", where, "--kill-at", "2",
        timeout=200,
    )
    assert result.returncode == 0, result.stdout[-5000:]
    assert events(run_dir)[0]["orchestrator"] == orchestrator
    dying = [e for e in events(run_dir) if e["event"] == "dying"]
    assert [(e["replica"], e["where"]) for e in dying] == [("1", "outer sync" if where == "sync" else "inner step")]
    survivor, restarted = _syncs(run_dir, "0"), _syncs(run_dir, "1")
    # The survivor committed every outer step (a failed sync is retried, never skipped) and finished.
    assert [s["step"] for s in survivor if s["committed"]] == list(range(1, OUTER_STEPS + 1))
    assert all(s["attempt"] == 0 for s in survivor)
    # Identical final parameters.
    finals = [torch.load(run_dir / "final" / f"replica_{r}.pt") for r in ("0", "1")]
    for mine, theirs in zip(*finals):
        assert torch.equal(mine, theirs)
    return survivor, restarted


def _assert_healed_with_full_state(survivor: list[dict[str, Any]], restarted: list[dict[str, Any]]) -> None:
    heal = next(s for s in restarted if s["attempt"] == 1 and s["healed"])
    assert heal["committed"] and heal["step"] > 2
    donor = next(s for s in survivor if s["step"] == heal["step"] and s["committed"])
    # Right after healing, the restarted replica has the donor's model, DiLoCo
    # global weights, inner (Adam) state and outer (Nesterov momentum) state.
    for key in ("model", "global", "inner", "outer"):
        assert heal[key] == donor[key], key
    # The inner states are the replicas' own again once they trained on their own data.
    last = [s for s in restarted if s["step"] == OUTER_STEPS][0], [s for s in survivor if s["step"] == OUTER_STEPS][0]
    assert last[0]["model"] == last[1]["model"] and last[0]["inner"] != last[1]["inner"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("orchestrator", ["embedded", "monarch"])
# The quorum's DiLoCo sync through a kill also runs on CI's second stack (TorchFT 0.3).
@pytest.mark.parametrize("where", ["inner", pytest.param("sync", marks=pytest.mark.newest_stack)])
def test_kill_then_heal_and_identical_parameters(tmp_path: Path, where: str, orchestrator: str) -> None:
    if orchestrator == "monarch":
        pytest.importorskip("monarch.actor")
    survivor, restarted = _run_with_kill(tmp_path / "run", where, orchestrator)
    _assert_healed_with_full_state(survivor, restarted)
    if where == "sync":
        # The victim died having sent only part of its pseudo-gradients: the
        # survivor's outer sync 2 -> 3 failed, kept its interval's work, was
        # retried and then committed.
        failed = [s for s in survivor if not s["committed"]]
        assert [(s["step"], s["work_kept"]) for s in failed] == [(2, True)]


def _healed_from_different_donors(ctx: WorkerContext) -> list[list[torch.Tensor]]:
    """Each rank holds another donor's weights and Adam state, as after a DiLoCo heal; then they take rank 0's."""
    ctx.init()
    torch.manual_seed(ctx.rank)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    params = list(model.parameters())
    broadcast_replica_state([p.data for p in params] + optimizer_tensors(optimizer, params))
    return [[p.detach().clone() for p in params], [t.clone() for t in optimizer_tensors(optimizer, params)]]


@pytest.mark.timeout(60)
def test_ranks_of_a_healed_replica_agree_on_one_donor() -> None:
    ranks = run_workers_ok(_healed_from_different_donors, 2)
    torch.manual_seed(1)
    assert not torch.equal(ranks[0][0][0], torch.nn.Linear(3, 2).weight.detach()), "rank 1 started elsewhere"
    for mine, theirs in zip(ranks[0][0] + ranks[0][1], ranks[1][0] + ranks[1][1]):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_monarch_run_rejects_sync_every_below_one(value: str) -> None:
    with pytest.raises(SystemExit, match="--sync-every must be >= 1"):
        parse_args(["--sync-every", value, "train.py"])


def test_monarch_run_rejects_unknown_sync(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--sync", "ring", "train.py"])
    assert "invalid choice: 'ring'" in capsys.readouterr().err


def test_monarch_run_exports_sync_to_workers() -> None:
    assert sync_env(parse_args(["--sync", "per-step", "--sync-every", "7", "train.py"])) == {
        "MONARCH_SYNC_MODE": "per-step",
        "MONARCH_SYNC_EVERY": "7",
    }
    assert sync_env(parse_args(["train.py"])) == {}  # the script's default: SyncConfig()


def test_monarch_orchestrator_exports_sync_to_trainers() -> None:
    from torch_monarch.launch.config import job_config

    args = parse_args(["--orchestrator", "monarch", "--sync", "per-step", "--sync-every", "7", "train.py"])
    env = job_config(args, env={"MONARCH_START_BARRIER": "1"}).worker_env()
    assert env == {
        "MONARCH_START_BARRIER": "1",
        "MONARCH_SYNC_MODE": "per-step",
        "MONARCH_SYNC_EVERY": "7",
        "MONARCH_WORKER_ARGS": "[]",  # train.py's arguments, for the trainers' forkserver
    }


@pytest.mark.parametrize(
    "argv, message",
    [(["--sync-every", "0"], "must be >= 1"), (["--sync-every", "-1"], "must be >= 1"),
     (["--sync-every", "x"], "not a whole number"), (["--sync", "ring"], "invalid choice: 'ring'")],
)
def test_demo_rejects_bad_sync(argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        demo_main([*argv, "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing may start on bad input"


def test_sync_config_validates_code_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SyncConfig() == SyncConfig(mode="diloco", every=20)
    with pytest.raises(ValueError, match="must be a whole number of steps >= 1"):
        SyncConfig(every=0)
    with pytest.raises(ValueError, match="unknown sync mode 'ring'"):
        SyncConfig(mode="ring")
    monkeypatch.setenv("MONARCH_SYNC_EVERY", "-2")
    with pytest.raises(ValueError, match=">= 1"):
        SyncConfig().with_env_overrides()
    monkeypatch.setenv("MONARCH_SYNC_EVERY", "5")
    monkeypatch.setenv("MONARCH_SYNC_MODE", "per-step")
    assert SyncConfig().with_env_overrides() == SyncConfig(mode="per-step", every=5)
