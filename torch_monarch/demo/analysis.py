"""Turns a phase's run directory into the demo's timeline and numbers.

Everything here is computed from what the job recorded while it ran: the
events (``events.jsonl``: injections, detections, restarts, heals, rejoins,
quorum changes) and every replica's committed steps (``steps.jsonl``: time,
step, loss, quorum id, participants).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from torch_monarch.demo.model import TinyLM
from torch_monarch.supervision.drills import worker_drill_kinds
from torch_monarch.supervision.events import Event
from torch_monarch.supervision.rundir import RunDir

__all__ = ["Commit", "FailureRecord", "RunData", "analyse_failures", "eval_final_params", "load_run", "missed_syncs", "participants_per_sync"]


@dataclass(frozen=True)
class Commit:
    t: float
    replica: str
    step: int
    loss: float
    quorum_id: Optional[int]
    participants: Optional[int]


@dataclass
class RunData:
    """A phase's recorded data, with times relative to the window start."""

    run_dir: RunDir
    window_start: float
    window_end: float
    events: list[dict[str, Any]]
    commits: dict[str, list[Commit]]

    @property
    def duration_s(self) -> float:
        return self.window_end - self.window_start

    def rel(self, t: float) -> float:
        return t - self.window_start

    def all_commits(self) -> list[Commit]:
        return sorted((c for cs in self.commits.values() for c in cs), key=lambda c: c.t)

    def max_step_at(self, t: float) -> int:
        best = 0
        for cs in self.commits.values():
            times = [c.t for c in cs]
            i = bisect.bisect_right(times, t)
            if i:
                best = max(best, cs[i - 1].step)
        return best

    def committed_steps(self) -> int:
        """Global steps committed inside the window."""
        return self.max_step_at(self.window_end) - self.max_step_at(self.window_start)

    def replica_steps(self) -> int:
        """(replica, step) commits inside the window: the work actually contributed."""
        return sum(1 for c in self.all_commits() if self.window_start <= c.t <= self.window_end)

    def loss_near(self, t: float, span_s: float = 3.0) -> Optional[float]:
        losses = [c.loss for c in self.all_commits() if t - span_s <= c.t <= t and not math.isnan(c.loss)]
        return statistics.fmean(losses) if losses else None


def load_run(run_dir: Path) -> RunData:
    rd = RunDir(run_dir)
    events = rd.events()
    start = next((e["t"] for e in events if e["event"] == Event.WINDOW_START), events[0]["t"] if events else 0.0)
    end = next((e["t"] for e in events if e["event"] == Event.WINDOW_END), start)
    commits: dict[str, list[Commit]] = {}
    for replica in rd.replica_ids():
        commits[replica] = sorted(
            (
                Commit(
                    t=r.t,
                    replica=replica,
                    step=r.step,
                    loss=float(r.fields.get("loss", float("nan"))),
                    quorum_id=r.fields.get("quorum_id"),
                    participants=r.fields.get("participants"),
                )
                for r in rd.iter_steps(replica)
            ),
            key=lambda c: c.t,
        )
    return RunData(rd, start, end, events, commits)


@dataclass
class FailureRecord:
    """One injected failure and how the job got over it (times relative to the window start)."""

    id: int
    kind: str
    replica: str
    rank: int
    injected_s: float
    detected_s: Optional[float] = None
    detected_as: str = ""
    restarted_s: Optional[float] = None
    healed_s: Optional[float] = None
    rejoined_s: Optional[float] = None
    quorum_before: Optional[int] = None
    quorum_during: Optional[int] = None
    participants_during: Optional[int] = None
    quorum_after: Optional[int] = None
    participants_after: Optional[int] = None
    healthy_stall_s: Optional[float] = None
    healthy_reform_s: Optional[float] = None
    #: steps or outer syncs the healthy replicas failed to commit while this failure lasted, losing their work
    #: (a DiLoCo sync retried with the interval's weights is not missed)
    healthy_missed_syncs: int = 0
    loss_at_injection: Optional[float] = None
    loss_at_rejoin: Optional[float] = None
    notes: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> bool:
        return self.rejoined_s is not None

    @property
    def detection_s(self) -> Optional[float]:
        return None if self.detected_s is None else self.detected_s - self.injected_s

    @property
    def rejoin_s(self) -> Optional[float]:
        return None if self.rejoined_s is None else self.rejoined_s - self.injected_s

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(recovered=self.recovered, detection_s=self.detection_s, rejoin_s=self.rejoin_s)
        return data


def _first(events: list[dict[str, Any]], name: Event, replica: str, after: float) -> Optional[dict[str, Any]]:
    for e in events:
        if e["event"] == name and str(e.get("replica")) == replica and e["t"] >= after:
            return e
    return None


def _max_gap(commits: list[Commit], start: float, end: float) -> Optional[float]:
    """Longest time between consecutive commits, over gaps that overlap [start, end]."""
    times = [c.t for c in commits]
    worst: Optional[float] = None
    for a, b in zip(times, times[1:]):
        if b >= start and a <= end:
            worst = max(worst or 0.0, b - a)
    return worst


def analyse_failures(run: RunData, replicas: int) -> list[FailureRecord]:
    records = []
    injects = [e for e in run.events if e["event"] == Event.INJECT]
    for n, inj in enumerate(injects):
        replica = str(inj["replica"])
        t_inj = float(inj["t"])
        # A drill (exception, collective failure) happens when the worker runs it.
        ran = _first(run.events, Event.INJECTED, replica, t_inj)
        if ran is not None and inj["kind"] in worker_drill_kinds() and ran["t"] - t_inj < 30:
            t_inj = float(ran["t"])
        next_inj = float(injects[n + 1]["t"]) if n + 1 < len(injects) else float("inf")
        rec = FailureRecord(
            id=int(inj.get("id", n)),
            kind=str(inj["kind"]),
            replica=replica,
            rank=int(inj.get("rank", -1)),
            injected_s=run.rel(t_inj),
        )
        detected = _first(run.events, Event.DETECTED, replica, t_inj - 0.5)
        if detected is not None:
            rec.detected_s = run.rel(detected["t"])
            rec.detected_as = f"{detected.get('kind')}: {str(detected.get('message', ''))[:60]}"
            restarted = next(
                (e for e in run.events if e["event"] == Event.WORKERS_STARTED and str(e.get("replica")) == replica and e["t"] >= detected["t"]),
                None,
            )
            if restarted is not None:
                rec.restarted_s = run.rel(restarted["t"])
                healed = _first(run.events, Event.HEALED, replica, restarted["t"])
                rejoined = _first(run.events, Event.REJOINED, replica, restarted["t"])
                if healed is not None:
                    rec.healed_s = run.rel(healed["t"])
                if rejoined is not None:
                    rec.rejoined_s = run.rel(rejoined["t"])
                    rec.quorum_after = rejoined.get("quorum_id")
        healthy = {r: cs for r, cs in run.commits.items() if r != replica}
        before = [c for cs in healthy.values() for c in cs if c.t <= t_inj]
        if before:
            rec.quorum_before = max(before, key=lambda c: c.t).quorum_id
        after = sorted((c for cs in healthy.values() for c in cs if c.t > t_inj), key=lambda c: c.t)
        reform = next((c for c in after if c.quorum_id != rec.quorum_before), None)
        if reform is not None and reform.t < next_inj:
            rec.quorum_during = reform.quorum_id
            rec.participants_during = reform.participants
            rec.healthy_reform_s = reform.t - t_inj
        end = (run.window_start + rec.rejoined_s + 2.0) if rec.rejoined_s is not None else min(next_inj, t_inj + 30.0)
        gaps = [g for g in (_max_gap(cs, t_inj, end) for cs in healthy.values()) if g is not None]
        rec.healthy_stall_s = max(gaps) if gaps else None
        rec.healthy_missed_syncs = sum(
            1
            for e in run.events
            if e["event"] == Event.SYNC_FAILED and not e.get("work_kept") and str(e.get("replica")) != replica and t_inj <= e["t"] <= end
        )
        if rec.rejoined_s is not None:
            t_rejoin = run.window_start + rec.rejoined_s
            full = next((c for c in after if c.t > t_rejoin + 0.01), None)
            if full is not None:
                rec.participants_after = full.participants
            rec.loss_at_rejoin = run.loss_near(t_rejoin)
        rec.loss_at_injection = run.loss_near(t_inj)
        if rec.quorum_during is None:
            rec.notes.append("healthy replicas kept their quorum id")
        records.append(rec)
    return records


def missed_syncs(run: RunData, failures: list[FailureRecord], *, work_kept: bool = False) -> int:
    """Failed commits (``sync_failed``) in the window of replicas that were not themselves failing then.

    ``work_kept=False``: those that lost the work since the last commit;
    True: failed DiLoCo syncs retried with the interval's weights.
    """
    failing = [(f.replica, run.window_start + f.injected_s, run.window_start + (f.rejoined_s or f.injected_s + 30.0)) for f in failures]
    count = 0
    for e in run.events:
        if e["event"] != Event.SYNC_FAILED or bool(e.get("work_kept")) != work_kept or not run.window_start <= e["t"] <= run.window_end:
            continue
        replica = str(e.get("replica"))
        if not any(replica == r and a <= e["t"] <= b for r, a, b in failing):
            count += 1
    return count


def participants_per_sync(run: RunData) -> dict[int, int]:
    """How many committed steps (outer syncs) in the window had 1, 2, ... replicas."""
    by_step: dict[int, int] = {}
    for c in run.all_commits():
        if run.window_start <= c.t <= run.window_end and c.participants is not None:
            by_step[c.step] = max(by_step.get(c.step, 0), c.participants)
    counts: dict[int, int] = {}
    for n in by_step.values():
        counts[n] = counts.get(n, 0) + 1
    return dict(sorted(counts.items()))


def eval_final_params(run_dir: Path, eval_batches: list[tuple[torch.Tensor, torch.Tensor]], model: TinyLM) -> dict[str, Any]:
    """Loads the final parameters of every rank of every replica: are they identical, and their eval loss.

    ``replicas`` counts the replicas that saved them, ``steps`` is one per replica.
    """
    files = sorted((run_dir / "final").glob("replica_*.pt"))
    states = [torch.load(f, map_location="cpu") for f in files]
    if not states:
        return {"replicas": 0, "identical": False, "loss": None, "steps": []}
    reference = states[0]["model"]
    identical = all(
        s["model"].keys() == reference.keys() and all(torch.equal(s["model"][k], reference[k]) for k in reference)
        for s in states[1:]
    )
    model.load_state_dict(reference)
    model.eval()
    with torch.no_grad():
        loss = statistics.fmean(model.loss(x, y).item() for x, y in eval_batches)
    by_replica = {s["replica"]: int(s["step"]) for s in states}
    return {"replicas": len(by_replica), "identical": identical, "loss": loss, "steps": list(by_replica.values())}
