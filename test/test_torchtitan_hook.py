"""``torch_monarch.integrations.torchtitan``: TorchTitan's FT manager gets a
ProcessGroupMonarch for ``--fault_tolerance.process_group monarch``.

Checked on CPU against TorchTitan 0.3.0's ``TorchFTManager`` (torchft's
Manager replaced by a recorder: no Lighthouse is needed to see what it was
given), and the choice of 0.2.x's FT trainer against modules laid out as
0.2.x's. The GPU run with TorchTitan 0.2.2's trainer is in test/gpu.
"""

from __future__ import annotations

import sys
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torchft = pytest.importorskip("torchft")
manager_module = pytest.importorskip("torchtitan.experiments.torchft.manager")

import torch_monarch  # noqa: E402
from torch_monarch import supervision  # noqa: E402
from torch_monarch.integrations import torchtitan as hook  # noqa: E402
from torch_monarch.torchft import ProcessGroupMonarch  # noqa: E402


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    made: dict[str, Any] = {}

    class RecordingManager:
        def __init__(self, pg: Any, **kwargs: Any) -> None:
            made["pg"] = pg
            made.update(kwargs)

    monkeypatch.setattr(torchft, "Manager", RecordingManager)
    return made


def _config(process_group: str) -> Any:
    return manager_module.TorchFTManager.Config(
        enable=True, process_group=process_group, process_group_timeout_ms=2500, replica_id=1, semi_sync_method="diloco"
    )


@pytest.mark.newest_stack
def test_monarch_gives_the_manager_a_process_group_monarch(recorded: dict[str, Any]) -> None:
    gloo = torchft.ProcessGroupGloo
    assert "torchtitan.experiments.torchft.manager.TorchFTManager" in hook.install()
    config = _config("monarch")
    manager_module.TorchFTManager(config)
    assert isinstance(recorded["pg"], ProcessGroupMonarch)
    if hasattr(torchft.process_group.ProcessGroup, "set_rank_info"):  # TorchFT 0.3: the Manager checks this
        assert recorded["pg"].supports_reconfigure
    assert recorded["pg"]._timeout == timedelta(milliseconds=2500)
    assert recorded["replica_id"] == "torchtitan_ft_1"
    assert recorded["use_async_quorum"] is False  # DiLoCo: synchronous quorum, as TorchTitan sets it
    # Nothing stays changed: the config says monarch again, torchft's gloo group is back.
    assert config.process_group == "monarch"
    assert torchft.ProcessGroupGloo is gloo


@pytest.mark.newest_stack
def test_other_process_groups_are_untouched(recorded: dict[str, Any]) -> None:
    hook.install()
    manager_module.TorchFTManager(_config("gloo"))
    assert isinstance(recorded["pg"], torchft.ProcessGroupGloo)
    with pytest.raises(ValueError, match="Unsupported process group: mpi"):
        manager_module.TorchFTManager(_config("mpi"))


def test_install_is_idempotent() -> None:
    hook.install()
    init = manager_module.TorchFTManager.__init__
    hook.install()
    assert manager_module.TorchFTManager.__init__ is init


def test_launcher_flags_fill_in_the_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPLICA_GROUP_ID", "1")
    monkeypatch.setenv("NUM_REPLICA_GROUPS", "2")
    args = hook._with_launcher_flags(["--fault_tolerance.enable"])
    assert args == ["--fault_tolerance.enable", "--fault_tolerance.replica_id=1", "--fault_tolerance.group_size=2"]
    given = ["--fault_tolerance.replica_id", "5", "--fault_tolerance.group_size=3"]
    assert hook._with_launcher_flags(given) == given


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def test_torchtitan_0_2_runs_its_ft_trainer_and_logs_the_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.2.x's plain Trainer ignores ``--fault_tolerance.*`` (no FT manager): main must run its FTTrainer."""
    import torchtitan

    ran: dict[str, Any] = {}
    recorded: list[tuple[int, dict[str, Any]]] = []

    class MetricsProcessor:
        def log(self, step: int, global_avg_loss: float, global_max_loss: float, grad_norm: float) -> None:
            pass

    class Trainer:
        def train_step(self, batch: Any) -> None:
            raise AssertionError("0.2.x's plain trainer ran")

    class FTTrainer(Trainer):
        def train_step(self, batch: Any) -> None:
            self.step += 1
            if self.step == 2:  # TorchTitan logs the loss every --metrics.log_freq steps
                self.metrics_processor.log(self.step, 2.5, 2.75, 0.5)

    class ConfigManager:
        # TorchTitan's default argument: sys.argv as it was when its module loaded (in a
        # forkserver that preloaded TorchTitan: the server's argv, not the worker's).
        def parse_args(self, args: list[str] = ["--stale.server_argv"]) -> list[str]:  # noqa: B006
            return args

    def main(trainer_class: type) -> None:
        ran["trainer"] = trainer_class
        ran["config"] = ConfigManager().parse_args()
        trainer = trainer_class()
        trainer.step, trainer.metrics_processor = 0, MetricsProcessor()
        for _ in range(3):
            trainer.train_step(None)

    train = _module("torchtitan.train", main=main, Trainer=Trainer)
    monkeypatch.setattr(torchtitan, "train", train, raising=False)
    for name, module in {
        "torchtitan.train": train,
        "torchtitan.experiments.ft.train": _module("torchtitan.experiments.ft.train", FTTrainer=FTTrainer),
        "torchtitan.components.metrics": _module("torchtitan.components.metrics", MetricsProcessor=MetricsProcessor),
        "torchtitan.config.manager": _module("torchtitan.config.manager", ConfigManager=ConfigManager),
        "torchtitan.trainer": None,  # 0.3.x only: importing it raises ImportError
        "torchtitan.experiments.torchft.trainer": None,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys, "argv", ["torchtitan"])
    # Not supervised here: the supervisor's wrapper ends the process on an error (pytest's too).
    monkeypatch.setattr(supervision, "supervised", lambda main: main)
    monkeypatch.setattr(supervision, "record_step", lambda step, **fields: recorded.append((step, fields)))
    monkeypatch.setenv("REPLICA_GROUP_ID", "1")
    monkeypatch.setenv("NUM_REPLICA_GROUPS", "2")
    hook.main(["--fault_tolerance.enable"])
    assert ran["trainer"] is FTTrainer
    assert ran["config"] == ["--fault_tolerance.enable", "--fault_tolerance.replica_id=1", "--fault_tolerance.group_size=2"]
    assert recorded == [(1, {}), (2, {"loss": 2.5}), (3, {})]


def test_a_module_missing_from_this_version_is_skipped_a_missing_dependency_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "titan_needs_triton.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    present = hook._present([("torchtitan.no_such_module", "Trainer"), ("torch_monarch", "Options")])
    assert present == [torch_monarch.Options]
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        hook._present([("titan_needs_triton", "Trainer")])
