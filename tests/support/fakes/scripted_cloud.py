"""A small in-test cloud that can read its size and fail on demand (a test double of a cloud, not of our code)."""
from __future__ import annotations

from autoscaler.models import CloudStatus
from providers import Capabilities, ProviderError, Tracked


class ScriptedCloud:
    """Reports its own size (``reports_count``) and raises the errors queued in ``failures``."""

    capabilities = Capabilities()

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.busy = False
        self.failures: list[ProviderError] = []
        self.calls: list[tuple[int, int]] = []

    def check(self) -> None:
        """Nothing to check."""

    def status(self, tracked: Tracked, now: float) -> CloudStatus:
        return CloudStatus(current=self.count, busy=self.busy, detail="Scaling" if self.busy else "")

    def scale(self, current: int, target: int, now: float, status: CloudStatus | None = None) -> int:
        self.calls.append((current, target))
        if self.failures:
            raise self.failures.pop(0)
        self.count = target
        return target
