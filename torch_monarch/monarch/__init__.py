"""The Monarch orchestrator: real Monarch actors supervise the job (``pip install 'torch_monarch[monarch]'``).

::

    OrchestrationManager         root: replaces an escalated replica through the
      │                          scheduler, or goes on while min_replicas remain
      ├── LighthouseActor        TorchFT's Lighthouse (the quorum)
      └── ReplicaActor × N       spawns its trainer mesh; __supervise__ applies the
            │                    RestartPolicy and restarts the mesh in place
            └── TrainerActor × n runs the training script (monarch-run's contract)

``monarch-run --orchestrator monarch`` and ``python -m torch_monarch.demo
--orchestrator monarch`` run jobs this way; :class:`MonarchJob` is the
client they use. Importing this package without ``torchmonarch`` raises
:class:`MonarchUnavailableError`, which names the extra to install.
"""

import importlib
from typing import Any

from torch_monarch.monarch._require import DEFAULT_SUPERVISION_POLL, MonarchUnavailableError, require_monarch

# Loaded on first use, after require_monarch(): without torchmonarch the
# error names the extra to install instead of "No module named 'monarch'".
_LAZY = {
    "LighthouseActor": "torch_monarch.monarch.lighthouse_actor",
    "MonarchJob": "torch_monarch.monarch.client",
    "OrchestrationManager": "torch_monarch.monarch.orchestration",
    "ReplicaActor": "torch_monarch.monarch.replica_actor",
    "ReplicaConfig": "torch_monarch.monarch.messages",
    "TrainerActor": "torch_monarch.monarch.trainer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_monarch()
    return getattr(importlib.import_module(module), name)


__all__ = ["DEFAULT_SUPERVISION_POLL", "MonarchUnavailableError", "require_monarch", *_LAZY]
