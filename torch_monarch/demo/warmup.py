"""Preloaded by the demo's forkserver: imports and warms up what a worker needs.

Workers (and every restarted worker) fork from a process that imported
this module, so they start with torch, torch._dynamo (which
``torch.optim`` pulls in on first use, seconds on a loaded host), TorchFT
and torch_monarch loaded, and on CPU with one tiny training step already
run (lazy kernel and autograd initialisation). Only single-threaded work
runs here: forking a process with an OpenMP pool running is unsafe.

With ``--device cuda`` there is no warm-up step: the first backward pass
starts the autograd engine's device threads, which asks the CUDA driver for
its devices (``cuInit``), and the children of a process that did that cannot
use the GPU (the forkserver refuses it, ``supervision/cuda_clean.py``).
"""

import torch

torch.set_num_threads(1)

import torch._dynamo  # noqa: E402,F401
import torchft.manager  # noqa: E402,F401

import torch_monarch.quorum  # noqa: E402,F401
import torch_monarch.torchft  # noqa: E402,F401
from torch_monarch.demo.config import DemoConfig  # noqa: E402
from torch_monarch.demo.data import MarkovData  # noqa: E402
from torch_monarch.demo.model import TinyLM  # noqa: E402


def _warm_up() -> None:
    cfg = DemoConfig()
    model = TinyLM(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    tokens, targets = MarkovData(cfg).batch(0, 0, 0)
    model.loss(tokens, targets).backward()
    optimizer.step()


if DemoConfig().with_env_overrides().device == "cpu":
    _warm_up()
