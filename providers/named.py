"""What every removal of named nodes shares, written once: finding each node's machine in the pool (refusing the
whole call for a stranger), sending the removal in parts with partial progress, and telling a lost answer from a
failure (the change went through, the answer did not come back)."""
from __future__ import annotations

import logging
from typing import Callable, Hashable, Sequence, TypeVar

from autoscaler.models import CloudStatus
from providers.base import NodeRef
from providers.errors import Code, PermanentError, ProviderError

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Hashable)
P = TypeVar("P")


def machines(nodes: Sequence[NodeRef], find: Callable[[NodeRef], M | None], where: str, noun: str,
             verb: str = "removed") -> list[M]:
    """Each node's machine, by ``find`` (None: not a machine of this pool), each once, in order; refuses the whole
    call, naming every stranger, when one is not found, so that nothing else is ever removed."""
    found: list[M] = []
    unknown: list[str] = []
    for node in nodes:
        machine = find(node)
        if machine is None:
            unknown.append(f"{node.name} ({node.provider_id or 'no providerID'})")
        elif machine not in found:
            found.append(machine)
    if unknown:
        raise PermanentError(f"{where} has no {noun} for node(s) {', '.join(unknown)} (not in this pool, or already "
                             f"gone); nothing was {verb}", code=Code.NODE_NOT_IN_POOL)
    return found


def agreed(node: NodeRef, by_name: str | None, by_id: str | None, where: str) -> str | None:
    """The machine a node's name and its providerID both point at (either alone will do); refuses two different
    ones, since removing either could take the wrong machine."""
    if by_name and by_id and by_name != by_id:
        raise PermanentError(f"{where}: node {node.name} is machine {by_name} but its providerID "
                             f"{node.provider_id} points at {by_id}; refusing to remove either",
                             code=Code.NODE_MISMATCH)
    return by_name or by_id


def in_parts(parts: Sequence[P], send: Callable[[P], object], went_through: Callable[[P], bool],
             size: Callable[[P], int], current: int, where: str, *, sign: int = -1) -> int:
    """Send each part of a change in turn; return how many nodes it moved. A part whose call failed but whose change
    the cloud shows (``went_through``: a lost answer, then a retry refused) counts as done; any other failure stops
    the change, its error saying how far it got (``applied``: the size reached, None when nothing went through)."""
    done = 0
    for index, part in enumerate(parts):
        try:
            send(part)
        except ProviderError as exc:
            if not _seen(went_through, part):
                reached = current + sign * done
                said = f"{exc.message}; {index} of {len(parts)} call(s) went through, the pool is at {reached}"
                raise exc.stopped(said, reached if index else None) from None
            log.warning("%s: a call failed (%s), but the cloud shows its change under way: an earlier attempt was "
                        "accepted and its answer lost", where, exc.message)
        done += size(part)
    return done


def lowered(read: Callable[[], CloudStatus], before: int | None, removed: int) -> Callable[[object], bool]:
    """``went_through`` of a single removal call: the pool reads busy, its size lowered by exactly ``removed``."""
    def check(_: object) -> bool:
        status = read()
        return before is not None and status.busy and status.current == before - removed
    return check


def left(members: Callable[[], set[str]], ids: Sequence[str]) -> bool:
    """``went_through`` of a per-group removal: none of ``ids`` is a member of the group any more."""
    return not set(ids) & members()


def _seen(went_through: Callable[[P], bool], part: P) -> bool:
    try:
        return went_through(part)
    except ProviderError:
        return False
