"""A repair an operator cancelled stays cancelled while the alert that asked for it keeps firing (docs/repair.md).

Alertmanager repeats a firing alert every ``repeat_interval`` with the same fingerprint and ``startsAt``; without a
memory of the cancel, each repeat would cordon the node again and ask for another replacement. So the firings that
asked for a node's repair (fingerprint and ``startsAt``, the alert's identity and its episode) are remembered with
the repair (``repair_alerts``); a cancel marks them; a repeat of a marked firing is ``skipped_cancelled`` and touches
nothing. A resolved notification forgets the alert's firings, and a new firing has a new ``startsAt`` anyway (even
where resolved notifications are not sent), so it starts a repair again. A repair asked by hand is never held back.
The alert's XID (its ``xid`` label, or the number in its summary) is carried into the repair's reason and details.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence, TypeVar

from autoscaler.config.durations import rfc3339
from autoscaler.models import Action, Alert, AlertStatus, Decision, Outcome, PoolSpec, PoolState, Signal
from autoscaler.storable import clean
from autoscaler.repair.parts import RepairParts
from autoscaler.store import PoolChange, RepairAlert, Store

T = TypeVar("T")
#: ``start._start_held``'s shape: the decision, the pool's change, and what the start did.
StartHeld = Callable[[RepairParts, PoolSpec, Signal, PoolState, float], tuple[Decision, PoolChange, T]]
XID_LABEL = "xid"  # the alert's label that carries the XID; else the number after "XID" in its summary
_XID_SAID = re.compile(r"\bXID\s*[:#=]?\s*(\d{1,4})\b", re.IGNORECASE)
FINGERPRINT_WIDTH = 200  # the widths of ``repair_alerts``' key columns: a key is matched as it is stored
STARTS_AT_WIDTH = 64


def _firings(signal: Signal, node_label: str) -> list[tuple[str, str, str]]:
    """(node, fingerprint, startsAt) of each alert of the signal that names a node and says when it started."""
    out = []
    for alert in signal.alerts:
        node = alert.labels.get(node_label, "").strip()
        if node and alert.fingerprint and alert.starts_at:
            out.append((node, clean(alert.fingerprint, FINGERPRINT_WIDTH), clean(alert.starts_at, STARTS_AT_WIDTH)))
    return out


def start_held(parts: RepairParts, spec: PoolSpec, signal: Signal, state: PoolState, now: float,
               start: StartHeld[T], nothing: T) -> tuple[Decision, PoolChange, T, list[RepairAlert]]:
    """``start`` (a repair's start under the pool's hold) for the nodes whose firing no operator cancelled, and
    the firings to remember (with the start's record) for the nodes now in repair; ``skipped_cancelled`` (and
    ``nothing``) when every node named was cancelled."""
    label = parts.settings.config.routing.node_label
    signal, xids = _with_xids(signal, label)
    firings = _firings(signal, label)
    marks = {(a.node, a.fingerprint, a.starts_at): a for a in parts.store.repair_alerts(spec.name)
             if a.cancelled_at is not None} if firings else {}
    live = {node for node, fp, at in firings if (node, fp, at) not in marks}
    held = [n for n in signal.nodes if n not in live and any(f[0] == n for f in firings)]
    if held and len(held) == len(signal.nodes):
        return _skipped(spec, signal, held, [marks[f] for f in firings if f in marks]), PoolChange(), nothing, []
    decision, change, done = start(parts, spec, replace(signal, nodes=tuple(n for n in signal.nodes
                                                                            if n not in held)), state, now)
    if xids:
        decision = replace(decision, details={**decision.details, "xid": xids})
    if held:
        decision = replace(decision, details={**decision.details, "cancelled": held},
                           reason=f"{decision.reason}; {_said(held)}")
    in_repair = set(decision.details.get("nodes", ())) | set(decision.details.get("duplicate", ()))
    noted = []
    if decision.outcome in (Outcome.REPAIR_STARTED, Outcome.SKIPPED_DUPLICATE) and in_repair:
        noted = [RepairAlert(spec.name, node, fp, at, now) for node, fp, at in firings if node in in_repair]
    return decision, change, done, noted


def _with_xids(signal: Signal, node_label: str) -> tuple[Signal, dict[str, str]]:
    """The signal with each named node's XID in its reason (so the repair's record and events keep it), and the
    XIDs by node: the alert's ``xid`` label, or the number after "XID" in its summary or description."""
    xids: dict[str, str] = {}
    for alert in signal.alerts:
        node = alert.labels.get(node_label, "").strip()
        label = alert.labels.get(XID_LABEL, "").strip()
        said = _XID_SAID.search(" ".join(alert.annotations.get(k, "") for k in ("summary", "description")))
        xid = label if label.isdigit() and len(label) <= 4 else (said.group(1) if said else "")
        if node and xid:
            xids.setdefault(node, xid)
    if not xids:
        return signal, {}
    told = ", ".join(f"XID {x} on {n}" for n, x in xids.items())
    return replace(signal, reason=f"{signal.reason} ({told})" if signal.reason else told), xids


def xid_of(reason: str, node: str) -> str | None:
    """The XID a repair's stored reason gives for ``node`` (see ``_with_xids``), else None."""
    found = re.search(rf"\bXID (\d+) on {re.escape(node)}\b", reason)
    return found.group(1) if found else None


def _said(held: list[str]) -> str:
    return (f"repair of {', '.join(held)} cancelled by an operator while this alert fires: its repeats start "
            "nothing until it resolves")


def _skipped(spec: PoolSpec, signal: Signal, held: list[str], marks: list[RepairAlert]) -> Decision:
    when = max(m.cancelled_at or 0.0 for m in marks)
    reason = f"{_said(held)} (cancelled at {rfc3339(when)}; see the repair_cancelled event); nothing was touched"
    return Decision(spec.name, Action.REPAIR, Outcome.SKIPPED_CANCELLED, None, None,
                    f"{signal.reason}: {reason}" if signal.reason else reason,
                    details={"cancelled": held, "cancelled_at": rfc3339(when)})


def resolved(store: Store, decision: Decision, alerts: Sequence[Alert]) -> None:
    """Forget the firings of repair alerts that resolved: a new firing of them starts a repair again."""
    if decision.action is Action.REPAIR and decision.outcome is Outcome.IGNORED_RESOLVED:
        fingerprints = [clean(a.fingerprint, FINGERPRINT_WIDTH) for a in alerts
                        if a.status is AlertStatus.RESOLVED and a.fingerprint]
        if fingerprints:
            store.forget_repair_alerts(fingerprints)
