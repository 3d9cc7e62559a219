"""The launcher's live status view: one row per replica, plus recent events.

Reads only the run directory, so it can also watch a job from another
terminal (``python -m torch_monarch.launch.status_view RUN_DIR``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO, Any, Optional

from torch_monarch.supervision.events import Event
from torch_monarch.supervision.rundir import AgentRecord, RunDir, WorkerRecord, read_jsonl
from torch_monarch.supervision.states import ACTIVE_WORKER_STATES, SupervisorState, WorkerState

__all__ = ["ReplicaRow", "StatusView", "all_training", "replica_rows"]


@dataclass
class ReplicaRow:
    replica_id: str
    state: str
    quorum_id: Optional[int]
    step: Optional[int]
    participants: Optional[int]
    restarts: int
    loss: Optional[float]


def _replica_state(agent: Optional[AgentRecord], workers: list[Optional[WorkerRecord]]) -> str:
    """The replica's state in a word: the supervisor's, refined by its workers' while it runs."""
    if agent is None:
        return SupervisorState.PENDING.value
    if agent.state != SupervisorState.RUNNING:
        return str(agent.state.value)
    live_pids = set(agent.workers.values())
    current = [w for w in workers if w is not None and w.pid in live_pids]
    if len(current) < len(live_pids) or any(w.state == WorkerState.STARTING for w in current):
        return WorkerState.STARTING.value
    states = {w.state for w in current}
    if WorkerState.HEALING in states:
        return WorkerState.HEALING.value
    if states <= ACTIVE_WORKER_STATES:
        return WorkerState.TRAINING.value
    return "/".join(sorted(states)) or WorkerState.STARTING.value


def replica_rows(run_dir: RunDir, replica_ids: list[str]) -> list[ReplicaRow]:
    rows = []
    for replica_id in replica_ids:
        agent = run_dir.read_agent(replica_id)
        n = max(1, len(agent.workers) if agent is not None else 0)
        workers = [run_dir.read_worker(replica_id, r) for r in range(n)]
        lead = workers[0]
        rows.append(
            ReplicaRow(
                replica_id=replica_id,
                state=_replica_state(agent, workers),
                quorum_id=lead.quorum_id if lead is not None else None,
                step=lead.step if lead is not None else None,
                participants=lead.participants if lead is not None else None,
                restarts=agent.restarts if agent is not None else 0,
                loss=lead.loss if lead is not None else None,
            )
        )
    return rows


def all_training(run_dir: RunDir, replica_ids: list[str]) -> bool:
    """True once every replica's workers train in one quorum of all replicas."""
    return all(
        row.state == WorkerState.TRAINING and row.quorum_id is not None and row.participants == len(replica_ids)
        for row in replica_rows(run_dir, replica_ids)
    )


def _fmt(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def describe_event(e: dict[str, Any]) -> Optional[str]:
    """One line for the events that matter to a human watching the job."""
    kind = e.get("event")
    r = e.get("replica")
    if kind == Event.INJECT:
        return f"injected {e.get('kind')} into replica {r} rank {e.get('rank')} (pid {e.get('pid')})"
    if kind == Event.DETECTED:
        return f"replica {r}: detected {e.get('kind')}: {e.get('who')}: {str(e.get('message', ''))[:80]}"
    if kind == Event.HANG_DETECTED:
        return f"replica {r}: hung worker pid {e.get('pid')}: {e.get('reason')}"
    if kind == Event.RESTART_SCHEDULED:
        return f"replica {r}: restarting workers in place (restart {e.get('restarts')}, backoff {e.get('delay_s', 0):.2f}s)"
    if kind == Event.WORKERS_STARTED and e.get("attempt"):
        return f"replica {r}: workers restarted (attempt {e.get('attempt')})"
    if kind == Event.HEALED:
        return f"replica {r}: healed at step {e.get('step')} (quorum {e.get('quorum_id')})"
    if kind == Event.REJOINED:
        return f"replica {r}: back in quorum {e.get('quorum_id')} with {e.get('participants')} replicas"
    if kind in (Event.ESCALATED, Event.REPLICA_REPLACING, Event.REPLICA_DROPPED, Event.JOB_FAILED):
        return f"replica {r}: {str(kind).replace('_', ' ')}"
    return None


class StatusView:
    """Renders the job's state to a stream.

    ``mode="live"`` redraws a table in place (ANSI); ``"log"`` prints events
    as they happen and a summary line every ``log_every_s``; ``"none"``
    prints nothing.
    """

    def __init__(
        self,
        run_dir: RunDir,
        replica_ids: list[str],
        mode: str = "live",
        stream: IO[str] = sys.stdout,
        title: str = "monarch-run",
        log_every_s: float = 10.0,
    ) -> None:
        self.run_dir = run_dir
        self.replica_ids = replica_ids
        self.mode = mode
        self.stream = stream
        self.title = title
        self.log_every_s = log_every_s
        self._offset = 0
        self._recent: list[str] = []
        self._t0 = time.time()
        self._last_log = 0.0
        self._lines_drawn = 0

    def _new_events(self) -> list[str]:
        records, self._offset = read_jsonl(self.run_dir.events_path, self._offset)
        lines = []
        for e in records:
            text = describe_event(e)
            if text:
                lines.append(f"[{float(e['t']) - self._t0:7.1f}s] {text}")
        return lines

    def table(self) -> list[str]:
        rows = replica_rows(self.run_dir, self.replica_ids)
        out = [f"{'replica':>7}  {'state':<12} {'quorum':>6} {'step':>6} {'in quorum':>9} {'restarts':>8} {'loss':>7}"]
        for row in rows:
            out.append(
                f"{row.replica_id:>7}  {row.state:<12} {_fmt(row.quorum_id):>6} {_fmt(row.step):>6} "
                f"{_fmt(row.participants):>9} {row.restarts:>8} {_fmt(row.loss, '.3f'):>7}"
            )
        return out

    def refresh(self, extra: str = "") -> None:
        if self.mode == "none":
            return
        new = self._new_events()
        now = time.time()
        if self.mode == "log":
            for line in new:
                print(line, file=self.stream, flush=True)
            if now - self._last_log >= self.log_every_s:
                self._last_log = now
                rows = replica_rows(self.run_dir, self.replica_ids)
                parts = [f"r{r.replica_id}:{r.state}@{_fmt(r.step)}(q{_fmt(r.quorum_id)})" for r in rows]
                print(f"[{now - self._t0:7.1f}s] {extra} " + " ".join(parts), file=self.stream, flush=True)
            return
        self._recent = (self._recent + new)[-8:]
        lines = [f"{self.title}  t={now - self._t0:6.1f}s  {extra}", *self.table(), "", *self._recent]
        if self._lines_drawn:
            self.stream.write(f"\x1b[{self._lines_drawn}F\x1b[J")
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._lines_drawn = len(lines)

    def close(self) -> None:
        if self.mode == "log":
            for line in self._new_events():
                print(line, file=self.stream, flush=True)


def main() -> None:  # pragma: no cover - manual tool
    import argparse

    parser = argparse.ArgumentParser(description="Watch a monarch-run job's run directory.")
    parser.add_argument("run_dir")
    parser.add_argument("--mode", choices=["live", "log"], default="live")
    args = parser.parse_args()
    run_dir = RunDir(args.run_dir)
    view = StatusView(run_dir, run_dir.replica_ids(), mode=args.mode)
    while True:
        view.refresh()
        time.sleep(0.5)


if __name__ == "__main__":  # pragma: no cover
    main()
