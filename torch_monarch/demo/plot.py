"""``timeline.png``: replicas in the quorum over time, and the loss with and without failures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from torch_monarch.demo.analysis import FailureRecord, RunData
from torch_monarch.supervision.drills import DRILL_KINDS
from torch_monarch.supervision.events import Event

__all__ = ["plot_timeline"]


def _color(kind: str) -> str:
    """One colour per drill kind (matplotlib's colour cycle, in the drill table's order)."""
    return f"C{DRILL_KINDS.index(kind) % 10}" if kind in DRILL_KINDS else "k"


def _smooth(values: list[float], n: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= n:
            acc -= values[i - n]
        out.append(acc / min(i + 1, n))
    return out


def _participants_series(run: RunData) -> tuple[list[float], list[int]]:
    """Replicas committing together, per commit of any replica (step function)."""
    times, counts = [], []
    by_step: dict[int, set[str]] = {}
    for c in run.all_commits():
        by_step.setdefault(c.step, set()).add(c.replica)
    for c in run.all_commits():
        times.append(run.rel(c.t))
        counts.append(len(by_step[c.step]))
    return times, counts


def _loss_series(run: RunData, smooth: int = 25) -> tuple[list[float], list[float]]:
    commits = [c for c in run.all_commits() if not math.isnan(c.loss)]  # a healing sync records no loss
    times = [run.rel(c.t) for c in commits]
    return times, _smooth([c.loss for c in commits], smooth * max(1, len(run.commits)))


def _failed_syncs(run: RunData) -> tuple[list[float], list[int]]:
    events = [e for e in run.events if e["event"] == Event.SYNC_FAILED]
    return [run.rel(e["t"]) for e in events], [int(e.get("participants") or 0) for e in events]


def plot_timeline(
    path: Path, run: RunData, baseline: RunData, failures: Sequence[FailureRecord], replicas: int, *, synced_every: int = 1
) -> None:
    """``synced_every``: inner steps per commit (DiLoCo's sync interval; 1 for per-step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_q, ax_loss) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    t, n = _participants_series(run)
    tb, nb = _participants_series(baseline)
    ax_q.step(tb, nb, where="post", color="0.6", lw=1.2, label="failure-free run")
    ax_q.step(t, n, where="post", color="tab:green", lw=1.5, label="with failures")
    ft, fn = _failed_syncs(run)
    if ft:
        ax_q.plot(ft, fn, "kx", ms=6, label="outer sync not committed" if synced_every > 1 else "step not committed")
    for f in failures:
        color = _color(f.kind)
        ax_q.axvline(f.injected_s, color=color, ls="--", lw=1)
        ax_q.text(f.injected_s, replicas + 0.15, f"{f.kind} r{f.replica}", color=color, fontsize=8, ha="center")
        if f.rejoined_s is not None:
            ax_q.axvspan(f.injected_s, f.rejoined_s, color=color, alpha=0.12)
    ax_q.set_ylim(0, replicas + 0.6)
    ax_q.set_yticks(range(0, replicas + 1))
    if synced_every > 1:
        ax_q.set_ylabel(f"replicas in each\nouter sync (DiLoCo,\nevery {synced_every} steps)")
    else:
        ax_q.set_ylabel("replicas committing\neach step")
    ax_q.legend(loc="lower right", fontsize=8)
    ax_q.set_title("torch_monarch demo: failures injected, replicas restarted in place, healed and rejoined")

    smooth = max(2, round(25 / synced_every))
    lt, lv = _loss_series(run, smooth)
    bt, bv = _loss_series(baseline, smooth)
    ax_loss.plot(bt, bv, color="0.6", lw=1.2, label="failure-free run")
    ax_loss.plot(lt, lv, color="tab:green", lw=1.5, label="with failures")
    for f in failures:
        ax_loss.axvline(f.injected_s, color=_color(f.kind), ls="--", lw=1)
    ax_loss.set_ylabel("training loss (smoothed)")
    ax_loss.set_xlabel("seconds since all replicas were training")
    ax_loss.set_xlim(0, max(run.duration_s, baseline.duration_s))
    ax_loss.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
