"""Goodput that machine load cannot lift above 1.

Comparing a run with failures against a failure-free run made before or
after it measures the machine as much as the recovery: on a shared host one
such ratio came out at 1.19. Here everything comes from one run, measured
against the same processes' own failure-free pace:

* Work is counted in blocks of :data:`BLOCK_INNER_STEPS` inner steps (three
  DiLoCo-20 outer syncs, or 60 per-step steps: long enough for step-to-step
  jitter to average out). Block ``k`` ends when the first replica commits
  its last step; it took ``Δ_k`` seconds.
* A replica *contributes* a step when it committed that step and the one
  before it: a replica that has just healed carries its donor's work, not
  its own.
* The failure-free pace ``m_k`` of block ``k`` is the median ``Δ`` of the
  blocks that no failure overlaps (from its injection until the victim is
  back) within :data:`PACE_WINDOW_S` of it: the same processes, at the same
  time, so the pace follows the machine's load as it drifts.
* ``goodput = Σ_k c_k · min(Δ_k, m_k) / Σ_k Δ_k``, where ``c_k`` is the mean
  fraction of replicas contributing to block ``k``'s steps.

Every term is at most its share of the denominator, so goodput <= 1
whatever the load: a block slower than the failure-free pace counts only
``m_k`` of its time, a faster one counts in full. Jitter can only lower it;
the failure-free run's own goodput (the demo computes both) shows how much.
"""

from __future__ import annotations

import statistics
from typing import Optional, Sequence

from torch_monarch.demo.analysis import FailureRecord, RunData

__all__ = ["BLOCK_INNER_STEPS", "goodput"]

BLOCK_INNER_STEPS = 60
#: the failure-free pace of a block: the median of the quiet blocks within this many seconds of it
PACE_WINDOW_S = 15.0


def _failure_spans(run: RunData, failures: Sequence[FailureRecord]) -> list[tuple[float, float]]:
    spans = []
    for f in failures:
        end = f.rejoined_s if f.rejoined_s is not None else f.injected_s + 30.0
        spans.append((run.window_start + f.injected_s, run.window_start + end))
    return spans


def goodput(run: RunData, replicas: int, failures: Sequence[FailureRecord], inner_steps_per_commit: int) -> Optional[float]:
    """The run's goodput (see the module docstring); None with fewer than two blocks in the window."""
    block = max(1, round(BLOCK_INNER_STEPS / max(1, inner_steps_per_commit)))
    done_at: dict[int, float] = {}
    committed_by: dict[int, set[str]] = {}
    for c in run.all_commits():
        done_at.setdefault(c.step, c.t)
        committed_by.setdefault(c.step, set()).add(c.replica)
    ends = sorted(s for s in done_at if s % block == 0 and run.window_start <= done_at[s] <= run.window_end)
    spans = _failure_spans(run, failures)
    blocks: list[tuple[float, float, float]] = []  # (start, end, contributing fraction)
    for first, last in zip(ends, ends[1:]):
        if last - first != block:
            continue
        shares = [len(committed_by.get(s, set()) & committed_by.get(s - 1, set())) / replicas for s in range(first + 1, last + 1)]
        blocks.append((done_at[first], done_at[last], statistics.fmean(shares)))
    if len(blocks) < 2:
        return None
    quiet = [(a, b) for a, b, _ in blocks if not any(a < f_end and b > f_start for f_start, f_end in spans)] or [
        (a, b) for a, b, _ in blocks
    ]
    def pace(a: float, b: float) -> float:
        middle = (a + b) / 2
        near = [q_end - q_start for q_start, q_end in quiet if abs((q_start + q_end) / 2 - middle) <= PACE_WINDOW_S]
        return statistics.median(near or [q_end - q_start for q_start, q_end in quiet])

    # The window's edges are partial blocks: a stall at the end, with no block
    # completed, is lost time like any other.
    head = (run.window_start, blocks[0][0], blocks[0][2])
    tail = (blocks[-1][1], run.window_end, blocks[-1][2])
    useful = sum(share * min(b - a, pace(a, b)) for a, b, share in [head, *blocks, tail])
    return useful / (run.window_end - run.window_start)
