"""``torch_monarch.integrations.torchtitan``: TorchTitan's FT manager gets a
ProcessGroupMonarch for ``--fault_tolerance.process_group monarch``.

Checked on CPU against TorchTitan 0.3.0's ``TorchFTManager`` (torchft's
Manager replaced by a recorder: no Lighthouse is needed to see what it was
given). The GPU run with TorchTitan 0.2.2's trainer is in test/gpu.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

torchft = pytest.importorskip("torchft")
manager_module = pytest.importorskip("torchtitan.experiments.torchft.manager")

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


def test_monarch_gives_the_manager_a_process_group_monarch(recorded: dict[str, Any]) -> None:
    gloo = torchft.ProcessGroupGloo
    assert "torchtitan.experiments.torchft.manager.TorchFTManager" in hook.install()
    config = _config("monarch")
    manager_module.TorchFTManager(config)
    assert isinstance(recorded["pg"], ProcessGroupMonarch)
    assert recorded["pg"]._timeout == timedelta(milliseconds=2500)
    assert recorded["replica_id"] == "torchtitan_ft_1"
    assert recorded["use_async_quorum"] is False  # DiLoCo: synchronous quorum, as TorchTitan sets it
    # Nothing stays changed: the config says monarch again, torchft's gloo group is back.
    assert config.process_group == "monarch"
    assert torchft.ProcessGroupGloo is gloo


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
