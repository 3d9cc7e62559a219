"""TorchTitan's fault tolerance over ``ProcessGroupMonarch``.

TorchTitan's FT manager builds the process group across replica groups from
``--fault_tolerance.process_group``, which it only knows as "gloo" or "nccl".
:func:`install` teaches it "monarch": the manager is built exactly as for
"gloo", except that the group it gets is
:class:`torch_monarch.torchft.ProcessGroupMonarch`. Nothing of TorchTitan is
copied or edited; the hook wraps the manager's constructor, for

* TorchTitan 0.2.x: ``torchtitan.components.ft.manager.FTManager``;
* TorchTitan 0.3.x: ``torchtitan.experiments.torchft.manager.TorchFTManager``.

Run TorchTitan's own trainer through this module, under ``monarch-run``::

    monarch-run --replicas 2 --nproc-per-node 1 -m torch_monarch.integrations.torchtitan \\
        --job.config_file llama3_debug.toml --fault_tolerance.enable \\
        --fault_tolerance.process_group monarch --fault_tolerance.semi_sync_method diloco

It installs the hook, fills in ``--fault_tolerance.replica_id`` and
``--fault_tolerance.group_size`` from the launcher (``REPLICA_GROUP_ID``,
``NUM_REPLICA_GROUPS``) unless given, and runs ``torchtitan.train.main``
supervised (an error is reported with its traceback before the worker dies),
telling the supervisor each step (progress, quorum, participants, and the
loss on the steps TorchTitan logs one, ``--metrics.log_freq``). With
0.2.x it runs the FT trainer (``torchtitan.experiments.ft.train.FTTrainer``,
with ``--job.custom_config_module torchtitan.components.ft.config`` for
DiLoCo's options): 0.2.x's plain trainer ignores ``--fault_tolerance.*``.
With TorchTitan 0.2.x, ``python -m torchtitan.experiments.ft.train
--experimental.custom_import torch_monarch.integrations.torchtitan`` installs
the hook from TorchTitan's own entry point instead (without the step reports).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import sys
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

from torch_monarch.integrations.patching import wrap_once

__all__ = ["PROCESS_GROUP", "install", "main", "preload"]

logger: logging.Logger = logging.getLogger(__name__)

PROCESS_GROUP = "monarch"
# (module, class) of TorchTitan's FT manager, newest first.
_MANAGERS = (
    ("torchtitan.experiments.torchft.manager", "TorchFTManager"),  # 0.3.x
    ("torchtitan.components.ft.manager", "FTManager"),  # 0.2.x
)
# (module, class) of TorchTitan's trainers, the FT ones first.
_TRAINERS = (
    ("torchtitan.experiments.ft.train", "FTTrainer"),  # 0.2.x
    ("torchtitan.experiments.torchft.trainer", "FaultTolerantTrainer"),  # 0.3.x
    ("torchtitan.trainer", "Trainer"),  # 0.3.x
    ("torchtitan.train", "Trainer"),  # 0.2.x
)
_LOGGED_LOSS = "_torch_monarch_logged_loss"  # (step, loss) TorchTitan's metrics last logged


def _monarch_process_group(timeout: timedelta) -> Any:
    """Stands in for ``torchft.ProcessGroupGloo(timeout=...)`` while the manager is built."""
    from torch_monarch.torchft import ProcessGroupMonarch

    return ProcessGroupMonarch(timeout=timeout)


def _hooked(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        if not (getattr(config, "enable", False) and getattr(config, "process_group", None) == PROCESS_GROUP):
            init(self, config, *args, **kwargs)
            return
        import torchft

        # The manager's "gloo" branch makes the group from the timeout alone:
        # for the constructor's duration it makes a monarch one.
        gloo = torchft.ProcessGroupGloo
        config.process_group = "gloo"
        torchft.ProcessGroupGloo = _monarch_process_group
        try:
            init(self, config, *args, **kwargs)
        finally:
            torchft.ProcessGroupGloo = gloo
            config.process_group = PROCESS_GROUP
        logger.info("TorchTitan's fault tolerance runs over ProcessGroupMonarch")

    return __init__


def install() -> list[str]:
    """Hooks every TorchTitan FT manager class present; returns their names. Idempotent.

    Raises ImportError naming the extra to install when TorchTitan (or
    torchft) is missing.
    """
    try:
        import torchft  # noqa: F401 - the manager needs it
    except ImportError as e:
        raise ImportError(
            "TorchTitan's fault tolerance needs TorchFT: "
            "pip install 'torch_monarch[ft,torchtitan]' (or [ft-nightly,torchtitan])"
        ) from e
    hooked = []
    for manager in _present(_MANAGERS):
        wrap_once(manager, "__init__", _hooked)
        hooked.append(f"{manager.__module__}.{manager.__qualname__}")
    if not hooked:
        raise ImportError(
            "no TorchTitan fault-tolerance manager found (TorchTitan 0.2.x or 0.3.x): pip install 'torch_monarch[torchtitan]'"
        )
    return hooked


def _reporting(train_step: Callable[..., Any]) -> Callable[..., Any]:
    """``train_step`` that tells the supervisor each step (progress, the replica's step log)."""
    from torch_monarch import supervision

    @functools.wraps(train_step)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = train_step(self, *args, **kwargs)
        fields: dict[str, Any] = {}
        manager = getattr(getattr(self, "ft_manager", None), "_manager", None)
        if manager is not None:
            try:
                fields = {"quorum_id": manager._quorum_id, "participants": manager.num_participants()}
            except (AssertionError, RuntimeError):
                pass  # no quorum yet
        logged = getattr(getattr(self, "metrics_processor", None), _LOGGED_LOSS, None)
        if logged is not None and logged[0] == self.step:
            fields["loss"] = logged[1]

        supervision.report_progress(self.step, **fields)
        if int(os.environ.get("RANK", "0")) == 0:
            supervision.record_step(self.step, **fields)
        return result

    return wrapper


def _remembering_loss(log: Callable[..., Any]) -> Callable[..., Any]:
    """``MetricsProcessor.log`` that keeps the step and loss it logged, for the step log."""

    @functools.wraps(log)
    def wrapper(self: Any, step: int, global_avg_loss: Any, *args: Any, **kwargs: Any) -> Any:
        setattr(self, _LOGGED_LOSS, (step, float(global_avg_loss)))
        return log(self, step, global_avg_loss, *args, **kwargs)

    return wrapper


def _present(names: Sequence[tuple[str, str]]) -> list[type]:
    """The classes named ``(module, class)`` that this TorchTitan has, in order, each once."""
    classes: list[type] = []
    for module_name, class_name in names:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not module_name.startswith(e.name):
                raise  # the module is there but needs something missing (say triton): say so
            continue  # not in this TorchTitan version
        found = getattr(module, class_name, None)
        if found is not None and found not in classes:
            classes.append(found)
    return classes


def _trainer_classes() -> list[type]:
    """TorchTitan's trainers with TorchFT first, then the plain one (each has its own ``train_step``).

    TorchTitan 0.2.x's plain ``torchtitan.train.Trainer`` never builds an FT
    manager: ``--fault_tolerance.*`` takes effect only in
    ``torchtitan.experiments.ft.train.FTTrainer``, which this module runs.
    """
    return _present(_TRAINERS)


def _with_launcher_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` plus the replica id and count that monarch-run (or torchft's launchers) set, unless given."""
    args = list(argv)
    given = " ".join(args)
    for flag, variable in (("--fault_tolerance.replica_id", "REPLICA_GROUP_ID"), ("--fault_tolerance.group_size", "NUM_REPLICA_GROUPS")):
        value = os.environ.get(variable)
        if value is not None and flag not in given:
            args.append(f"{flag}={value}")
    return args


def _current_argv(parse_args: Callable[..., Any]) -> Callable[..., Any]:
    """``ConfigManager.parse_args`` that reads ``sys.argv`` when called, not when its module loaded.

    Its default argument is ``sys.argv[1:]`` as it was at TorchTitan's import:
    in a worker forked from a server that preloaded TorchTitan, the server's.
    """

    @functools.wraps(parse_args)
    def wrapper(self: Any, args: Optional[list[str]] = None) -> Any:
        return parse_args(self, sys.argv[1:] if args is None else args)

    return wrapper


def _hook_trainers() -> list[type]:
    """Imports TorchTitan's trainers and hooks them (manager, step reports, argv); returns the trainers."""
    install()
    from torchtitan.components.metrics import MetricsProcessor
    from torchtitan.config.manager import ConfigManager

    trainers = _trainer_classes()
    for trainer_class in trainers:
        wrap_once(trainer_class, "train_step", _reporting)
    wrap_once(MetricsProcessor, "log", _remembering_loss)
    wrap_once(ConfigManager, "parse_args", _current_argv)
    return trainers


def preload() -> list[str]:
    """What a forkserver does for TorchTitan workers (``torchtitan_preload``); returns what it loaded.

    Imports TorchTitan's trainers, hooked, and loads the tokenizer and the
    dataset the workers' arguments name (``torchtitan_startup``): every
    worker, restarted ones included, forks with them loaded. TorchTitan asks
    ``torch.cuda.is_available()`` at import, which the forkserver answers
    through NVML, so CUDA stays uninitialised (``supervision/cuda_clean.py``).
    """
    from torch_monarch.integrations import torchtitan_startup
    from torch_monarch.supervision.preload import worker_args

    _hook_trainers()
    torchtitan_startup.keep()
    args = worker_args()
    return torchtitan_startup.warm(args) if args is not None else []


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m torch_monarch.integrations.torchtitan [TorchTitan's arguments]``."""
    from torch_monarch import supervision

    sys.argv = [sys.argv[0], *_with_launcher_flags(sys.argv[1:] if argv is None else argv)]
    trainers = _hook_trainers()
    from torchtitan import train

    # 0.2.x's main takes the trainer class (its FT trainer); 0.3.x's builds
    # the one its config names.
    supervision.supervised(train.main)(*trainers[:1] if inspect.signature(train.main).parameters else ())


if __name__ == "__main__":
    main()
else:
    # Imported by TorchTitan's --experimental.custom_import (0.2.x): hook now.
    # A plain import for the helpers above has no TorchTitan to hook yet.
    if "torchtitan" in sys.modules:
        install()
