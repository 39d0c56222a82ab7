"""One error vocabulary for every provider: the kind is the type, the situation is one of our codes.

In the style of kopf's ``TemporaryError`` / ``PermanentError``: what the engine does with an error follows from its
type alone (a temporary one asks the sender to retry, a limit is ``skipped_limit``, nothing is a flag). The code
names the situation in our words, the same for every cloud (``PoolBusy`` whether AKS, EKS, GKE or ACK is busy);
the cloud's own code and message ride beside it (``cloud_code``, ``cloud_message``) for people, and reach the
event's ``details``. No message may hold a secret: providers redact URLs and never include credentials.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Any

from autoscaler.config.durations import bounded_wait


class Code(StrEnum):
    """Our codes: one per situation, whichever cloud is in it."""

    BUSY = "PoolBusy"  # the cloud is still working on an earlier change
    OUTSIDE_LIMITS = "OutsideCloudLimits"  # the target is outside the cloud's own limits (not a failure)
    CLOUD_AUTOSCALER = "ClusterAutoscalerEnabled"  # the cloud's own autoscaler owns the pool's size
    POOL_STOPPED = "PoolStopped"  # stopped by its owner; start it first
    POOL_UNUSABLE = "PoolUnusable"  # being deleted, or failed to be created or deleted
    NO_INSTANCE_GROUP = "NoInstanceGroup"  # the pool names no group of machines to act on
    NODE_NOT_IN_POOL = "NodeNotInPool"  # a node to remove is no machine of this pool (nothing was removed)
    NODE_MISMATCH = "NodeMismatch"  # a node's name and its providerID point at two different machines
    NODES_NOT_SUPPORTED = "NodesNotSupported"  # the pool cannot be told which nodes to remove
    NO_CREDENTIALS = "NoCredentials"  # no usable credential for the cloud's API
    THROTTLED = "Throttled"  # the cloud asked us to slow down (429, throttling, API quota)
    UNAVAILABLE = "CloudUnavailable"  # no answer, or 5xx, until the call's time budget ran out
    CHANGED = "PoolChanged"  # the pool changed since it was read (412)
    REFUSED = "CloudRefused"  # the cloud refused the request; its own code says why
    BAD_ANSWER = "BadAnswer"  # an answer we cannot read
    NOT_SENT = "NotSent"  # the request could not even be sent (a malformed URL)
    NO_CAPACITY = "NoCapacity"  # accepted, but no machines to be had (stockout, quota): see NoCapacityError
    INTERNAL = "Internal"  # a bug or a library's surprise


class ProviderError(Exception):
    """A read or a change that did not work. Raise one of the subclasses, never this class itself.

    ``applied`` is the size the pool really reached when a change made of several calls stopped half-way (an ACK
    hook scale-in of 3 nodes where the second call failed); None when nothing went through.
    """

    default_code = Code.REFUSED
    retryable = False  #: whether the same call later could succeed (the webhook then answers 503): from the type
    retry_after: float | None = None

    def __init__(self, message: str, *, code: Code | None = None, cloud_code: str | None = None,
                 cloud_message: str | None = None, applied: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.cloud_code = cloud_code
        self.cloud_message = cloud_message
        self.applied = applied

    @property
    def shown_code(self) -> str:
        """The code a person looks up: the cloud's own when it gave one, else ours."""
        return self.cloud_code or self.code.value

    def details(self) -> dict[str, Any]:
        """What an event's ``details`` keep of this error: our code, whether a retry may help, the cloud's own."""
        out: dict[str, Any] = {"code": self.code.value, "retryable": self.retryable}
        if self.cloud_code:
            out["cloud_code"] = self.cloud_code
        if self.cloud_message:
            out["cloud_message"] = self.cloud_message
        return out

    def stopped(self, message: str, applied: int | None) -> ProviderError:
        """The same error (same type, codes and delay) for a change that stopped part-way, with a new message."""
        copy = _copy(self, message)
        copy.applied = applied
        return copy


class TemporaryError(ProviderError):
    """The same call later can succeed (throttling, 5xx, timeouts, a busy pool); ``retry_after`` is the cloud's
    own hint in seconds, when it gave one, kept within a day (``durations.bounded_wait``: whoever raises this,
    no ``inf`` reaches a wait or a ``Retry-After``)."""

    default_code = Code.UNAVAILABLE
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = bounded_wait(retry_after)


class BusyError(TemporaryError):
    """The cloud is still working on an earlier change to the pool."""

    default_code = Code.BUSY


class NoCapacityError(TemporaryError):
    """The cloud accepted a size but has no machines to give (a stockout, a quota): try later or elsewhere."""

    default_code = Code.NO_CAPACITY


class PermanentError(ProviderError):
    """A retry cannot help until someone changes something (credentials, the pool, the config)."""

    default_code = Code.REFUSED


class LimitError(PermanentError):
    """The target is outside the cloud's own limits: a limit (``skipped_limit``), not a failure."""

    default_code = Code.OUTSIDE_LIMITS


def cloud_autoscaler(where: str, owner: str, fix: str) -> PermanentError:
    """The pool is under the cloud's own autoscaler, which owns its size then."""
    return PermanentError(f"{where} has {owner} enabled, and the cloud owns its size then: {fix} or remove this pool "
                          "from the autoscaler service", code=Code.CLOUD_AUTOSCALER)


def _copy(exc: ProviderError, message: str) -> ProviderError:
    copy = exc.__class__.__new__(exc.__class__)
    copy.__dict__.update(exc.__dict__)
    copy.message = message
    copy.args = (message,)
    return copy
