"""Quorum across replicas: TorchFT's Lighthouse and Manager, with ProcessGroupMonarch.

Within a replica the workers use the "monarch" backend; across replicas
TorchFT's Manager runs quorums against a Lighthouse (every step, or at
DiLoCo's outer syncs: :mod:`torch_monarch.quorum.sync`) and
reconfigures a ``ProcessGroupMonarch`` when membership changes: healthy
replicas drop a failed one (``quorum_id`` + 1) and keep stepping; a
restarted replica heals from a donor the quorum picks and rejoins.
"""

from torch_monarch.quorum.lighthouse import EmbeddedLighthouse, LighthouseConfig, TORCHFT_DEFAULTS
from torch_monarch.quorum.manager import QuorumConfig, make_manager
from torch_monarch.quorum.process_group import make_process_group
from torch_monarch.quorum.sync import DiLoCoSync, SyncConfig

__all__ = [
    "DiLoCoSync",
    "EmbeddedLighthouse",
    "LighthouseConfig",
    "QuorumConfig",
    "SyncConfig",
    "TORCHFT_DEFAULTS",
    "make_manager",
    "make_process_group",
]
