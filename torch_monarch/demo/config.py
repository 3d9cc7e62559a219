"""The demo's settings, shared by its driver and its workers (env: ``MONARCH_DEMO_<FIELD>``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

from torch_monarch._config import Config

__all__ = ["DemoConfig"]


@dataclass(frozen=True)
class DemoConfig(Config):
    """Model, data and optimisation of the demo's language model.

    The model is deliberately tiny: 8 worker processes share 2 CPU cores in
    the default run, and what the demo measures is recovery, not FLOPs.
    """

    ENV_PREFIX: ClassVar[str] = "MONARCH_DEMO_"

    vocab: int = 32
    seq_len: int = 24
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 64
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 50
    data_seed: int = 1234
    init_seed: int = 0
    eval_batches: int = 16
    #: stop after this many committed steps (0: run until the job asks to stop)
    max_steps: int = 0
    #: backend inside a replica ("gloo" for the TorchFT-default comparison)
    backend: str = "monarch"
    #: op timeout of the replica's own process group (torch's default for gloo is 1800 s)
    pg_timeout: timedelta = timedelta(seconds=30)
    #: "cpu", or "cuda": replica r trains on visible GPU r mod the GPU count
    device: str = "cpu"
