"""Synthetic language: sequences from a fixed, sparse order-2 Markov chain.

The next token depends on the previous two: each of the vocab² contexts
has 3 likely successors. The model has to learn all those contexts, so the
loss keeps falling for the whole demo, from ln(vocab) towards the chain's
entropy rate (:meth:`MarkovData.entropy_rate`, the best loss reachable).
Batches are a pure function of (step, replica, rank): a restarted worker
draws exactly the batches it would have drawn, so no data state needs
checkpointing.
"""

from __future__ import annotations

import math

import torch

from torch_monarch.demo.config import DemoConfig

__all__ = ["MarkovData"]


class MarkovData:
    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        v = cfg.vocab
        g = torch.Generator().manual_seed(cfg.data_seed)
        logits = torch.full((v * v, v), -4.0)
        preferred = torch.tensor([2.0, 1.0, 0.5])
        for context in range(v * v):
            logits[context, torch.randperm(v, generator=g)[:3]] = preferred
        self.transitions = torch.softmax(logits, dim=-1)  # [(prev2, prev1), next]
        self._cumulative = self.transitions.cumsum(dim=-1)

    def entropy_rate(self) -> float:
        """Best achievable cross-entropy per token (nats), under the stationary distribution."""
        v = self.cfg.vocab
        p = self.transitions.double().view(v, v, v)  # [a, b, c] = P(c | a, b)
        pi = torch.full((v, v), 1.0 / (v * v), dtype=torch.float64)  # over contexts (a, b)
        for _ in range(300):
            pi = (pi.unsqueeze(-1) * p).sum(dim=0)  # (b, c)
        h = -(p * p.clamp_min(1e-30).log()).sum(dim=-1)  # per context (a, b)
        return float((pi * h).sum())

    def _sample(self, g: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.cfg.vocab
        length = self.cfg.seq_len + 1
        seq = torch.empty(n, length, dtype=torch.long)
        seq[:, :2] = torch.randint(v, (n, 2), generator=g)
        u = torch.rand(n, length, generator=g)
        for i in range(2, length):
            context = seq[:, i - 2] * v + seq[:, i - 1]
            seq[:, i] = torch.searchsorted(self._cumulative[context], u[:, i : i + 1].contiguous()).squeeze(1).clamp_max(v - 1)
        return seq[:, :-1], seq[:, 1:]

    def batch(self, step: int, replica: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        seed = (self.cfg.data_seed * 1_000_003 + step) * 1009 + replica * 31 + rank
        return self._sample(torch.Generator().manual_seed(seed), self.cfg.batch_size)

    def eval_set(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(self.cfg.data_seed + 777)
        return [self._sample(g, self.cfg.batch_size * 4) for _ in range(self.cfg.eval_batches)]

    @staticmethod
    def uniform_loss(vocab: int) -> float:
        return math.log(vocab)
