"""Quorum across replicas: TorchFT's Lighthouse and Manager, with ProcessGroupMonarch.

Within a replica the workers use the "monarch" backend; across replicas
TorchFT's Manager runs per-step quorums against a Lighthouse and
reconfigures a ``ProcessGroupMonarch`` when membership changes: healthy
replicas drop a failed one (``quorum_id`` + 1) and keep stepping; a
restarted replica heals from a donor the quorum picks and rejoins.
"""

from torch_monarch.quorum.lighthouse import EmbeddedLighthouse, LighthouseConfig, TORCHFT_DEFAULTS
from torch_monarch.quorum.manager import QuorumConfig, make_manager
from torch_monarch.quorum.process_group import make_process_group

__all__ = ["EmbeddedLighthouse", "LighthouseConfig", "QuorumConfig", "TORCHFT_DEFAULTS", "make_manager", "make_process_group"]
