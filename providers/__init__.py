"""Registry of node-pool providers by name.

Provider modules are imported lazily by name, so a cloud SDK is loaded only when a pool uses it.
Each module exposes ``FACTORY: ProviderFactory``.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from autoscaler.clock import SYSTEM, Clock
from providers.base import Capabilities, NodePoolProvider, NodeRef, ProviderFactory, RemovesNamedNodes, Tracked
from providers.errors import (BusyError, Code, LimitError, NoCapacityError, PermanentError, ProviderError,
                              TemporaryError)

__all__ = ["BusyError", "Capabilities", "Code", "LimitError", "NoCapacityError", "NodePoolProvider", "NodeRef",
           "PermanentError", "ProviderError", "ProviderFactory", "RemovesNamedNodes", "TemporaryError", "Tracked",
           "available", "build", "capabilities", "factory"]

_MODULES: dict[str, str] = {
    "simulated": "providers.simulated",
    "aks": "providers.aks",
    "ack_hook": "providers.ack_hook",
    "ack": "providers.ack",
    "webhook": "providers.webhook",
    "eks": "providers.eks",
    "gke": "providers.gke",
}


def available() -> list[str]:
    """Names of the providers that can be configured."""
    return sorted(name for name in _MODULES if _importable(name))


def _importable(name: str) -> bool:
    return importlib.util.find_spec(_MODULES[name]) is not None


def factory(name: str) -> ProviderFactory:
    """The factory registered under ``name``; KeyError with the known names when there is none."""
    if name not in _MODULES or not _importable(name):
        raise KeyError(f"unknown provider {name!r} (known: {', '.join(available())})")
    module = importlib.import_module(_MODULES[name])
    return module.FACTORY  # type: ignore[no-any-return]


def build(name: str, pool: str, settings: Any, clock: Clock = SYSTEM) -> NodePoolProvider:
    """Build the provider for one pool from its validated settings, on the service's time source."""
    return factory(name).build(pool, settings, clock)


def capabilities(name: str, settings: Any) -> Capabilities:
    """What a pool of provider ``name`` with these validated settings can do (its factory's declaration)."""
    return factory(name).capabilities(settings)
