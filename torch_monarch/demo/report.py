"""The demo's printed timeline and its ``summary.json``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from torch_monarch.demo.analysis import FailureRecord

__all__ = ["PER_STEP_TARGETS", "TARGETS", "format_summary", "format_timeline", "targets_met", "write_summary"]

#: Targets on a 2-core machine with the demo's defaults (DiLoCo every 20 steps; issue 16).
TARGETS = {
    "every failure recovered": "failures_recovered == failures_injected",
    "healthy replicas never miss an outer sync": "healthy_missed_syncs == 0",
    "failed replica back in an outer sync <= 5 s (median)": "median_rejoin_s <= 5",
    "goodput >= 0.95": "goodput >= 0.95",
    "identical final parameters": "final_params_identical",
    "final loss within 10% of the failure-free run": "abs(final_loss / baseline_final_loss - 1) <= 0.10",
}

#: With ``--sync per-step`` (issue 6's targets).
PER_STEP_TARGETS = {
    "every failure recovered": "failures_recovered == failures_injected",
    "healthy replicas stall < 2 s per failure": "max_healthy_stall_s < 2",
    "failed replica back in quorum < 15 s": "max_rejoin_s < 15",
    "goodput >= 0.85": "goodput >= 0.85",
    "identical final parameters": "final_params_identical",
    "final loss within 10% of the failure-free run": "abs(final_loss / baseline_final_loss - 1) <= 0.10",
}


def _f(value: Optional[float], spec: str = ".2f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _plus(value: Optional[float], base: float) -> str:
    return "-" if value is None else f"+{value - base:.2f}"


def format_timeline(failures: Sequence[FailureRecord]) -> str:
    lines = [
        "Failure timeline (seconds since all replicas were training; detection, restart, heal and rejoin relative to injection)",
        f"{'#':>2} {'kind':<5} {'victim':<8} {'injected':>8} {'detected':>8} {'restart':>8} {'healed':>8} {'rejoined':>8} "
        f"{'quorum ids':<14} {'replicas':<8} {'stall':>6} {'missed':>6} {'loss':>13}",
    ]
    for f in failures:
        quorum = f"{_f(f.quorum_before, 'd')}>{_f(f.quorum_during, 'd')}>{_f(f.quorum_after, 'd')}"
        replicas = f"{_f(f.participants_during, 'd')}>{_f(f.participants_after, 'd')}"
        loss = f"{_f(f.loss_at_injection, '.3f')}>{_f(f.loss_at_rejoin, '.3f')}"
        lines.append(
            f"{f.id:>2} {f.kind:<5} {'r' + f.replica + '/' + str(f.rank):<8} {f.injected_s:>8.2f} "
            f"{_plus(f.detected_s, f.injected_s):>8} {_plus(f.restarted_s, f.injected_s):>8} "
            f"{_plus(f.healed_s, f.injected_s):>8} {_plus(f.rejoined_s, f.injected_s):>8} "
            f"{quorum:<14} {replicas:<8} {_f(f.healthy_stall_s):>6} {f.healthy_missed_syncs:>6} {loss:>13}"
        )
        if f.detected_as:
            lines.append(f"{'':>3} detected as {f.detected_as}")
    lines.append(
        "quorum ids: before > healthy replicas' reformed quorum > quorum the restarted replica rejoined; "
        "replicas: in the reformed quorum > after rejoin; stall: longest gap between two commits (steps or outer syncs) "
        "of a healthy replica; missed: commits the healthy replicas failed meanwhile"
    )
    return "\n".join(lines)


def targets_met(summary: dict[str, Any], *, diloco: bool = True) -> dict[str, bool]:
    env = dict(summary)
    out = {}
    for name, expr in (TARGETS if diloco else PER_STEP_TARGETS).items():
        try:
            out[name] = bool(eval(expr, {"abs": abs}, env))  # noqa: S307 - our own fixed expressions
        except Exception:  # noqa: BLE001 - a missing number fails the target
            out[name] = False
    return out


def format_summary(summary: dict[str, Any]) -> str:
    keys = [
        "sync",
        "failures_injected",
        "failures_recovered",
        "max_healthy_stall_s",
        "median_rejoin_s",
        "max_rejoin_s",
        "healthy_missed_syncs",
        "healthy_retried_syncs",
        "participants_per_sync",
        "goodput",
        "baseline_goodput",
        "committed_steps",
        "baseline_committed_steps",
        "final_params_identical",
        "final_loss",
        "baseline_final_loss",
        "loss_floor",
    ]
    lines = ["Summary"]
    for key in keys:
        value = summary.get(key)
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<26} {text}")
    lines.append("Targets")
    for name, ok in summary.get("targets", {}).items():
        lines.append(f"  [{'x' if ok else ' '}] {name}")
    return "\n".join(lines)


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
