"""One signal's way through the engine: the signal, its pool and provider, its dedup claim, who leases the pool, when.

Built once per signal in ``Engine.handle`` and carried whole through the engine and the event log, instead of the
same five values passed one by one.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from autoscaler.models import Alert, CloudStatus, Decision, Outcome, PoolSpec, Signal
from autoscaler.store import DedupConfirm, DedupStore, StoreUnavailable
from providers import NodePoolProvider

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DedupClaim:
    """A signal's dedup keys, claimed under one id: held for a short while first, confirmed for the full window with
    the decision's record, released when the sender's retry must act."""

    store: DedupStore
    pool: str
    keys: tuple[str, ...]
    longest: float = 0.0  # the pool's full dedup window: what a confirmed claim holds
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def take(self, now: float, window: float) -> bool:
        """Claim the keys until ``now + window``; False when another delivery of the same alerts holds them (for up
        to ``longest``, the pool's full window, which a shorter first claim never cuts short)."""
        return not self.keys or self.store.claim_dedup(self.pool, self.keys, now, window, self.id, self.longest)

    def release(self) -> None:
        """Free the keys, so that the sender's retry is decided rather than skipped as a duplicate."""
        self.store.release_dedup(self.keys, self.id)

    def forget(self) -> None:
        """Best effort ``release`` for a decision that never ran (the database went away in between)."""
        try:
            self.release()
        except StoreUnavailable:
            log.warning("dedup claim %s left to expire by itself: store unavailable", self.id)

    def confirm(self, now: float, expires_at: float) -> DedupConfirm | None:
        """The confirmation to write with the decision's record (None: no keys): until ``expires_at``, counted
        from ``now``."""
        return DedupConfirm(self.keys, self.id, expires_at, now) if self.keys else None


@dataclass(frozen=True)
class Attempt:
    """One signal on one configured pool. ``now`` is the decision's time: read once, after the pool's stored state
    (see ``Engine.handle``), and again once a leased decision holds the pool; ``deadline`` (monotonic) is when
    waiting for the pool's lock and lease gives up."""

    signal: Signal
    spec: PoolSpec
    provider: NodePoolProvider
    claim: DedupClaim
    owner: str
    now: float
    deadline: float
    status: CloudStatus | None = None  # the cloud's status the decision is made on (read under the lease)

    @property
    def source(self) -> str:
        """The event's source."""
        return self.signal.source.value

    @property
    def alerts(self) -> list[Alert]:
        """The alerts the event names."""
        return list(self.signal.alerts)

    @property
    def expires_at(self) -> float:
        """When the dedup keys of a recorded decision expire."""
        return self.now + self.spec.dedup_window

    def duplicate(self) -> Decision:
        """The decision when every dedup key was already claimed."""
        return Decision(self.spec.name, self.signal.action, Outcome.SKIPPED_DUPLICATE, None, None,
                        f"{self.signal.reason}: same notification already handled within "
                        f"the {self.spec.dedup_window:.0f}s dedup window")

    def said(self, reason: str) -> str:
        """``reason`` prefixed by what the signal says of itself (e.g. ``alert GPUUtilizationHigh``)."""
        return f"{self.signal.reason}: {reason}" if self.signal.reason else reason
