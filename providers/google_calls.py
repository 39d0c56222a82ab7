"""Google's answers made readable, for the one retry layer (:mod:`providers.retry`): the SDK's and Compute's REST
errors as Transient or our errors with Google's status and message, never a credential."""
from __future__ import annotations

import warnings
from typing import Any

from providers.bounded import AnswerTooLarge
from providers.errors import Code, PermanentError
from providers.retry import Transient, refusal

_BUSY_STATUS = frozenset({409, 412})
GOOGLE_ANSWER = 16 * 1024 * 1024  # bytes: the most of one GKE or Compute answer read (see providers/bounded.py)


def load_google() -> None:
    """Import google-api-core and the GKE client, once, with their notice about this Python version's support window
    silenced: a dated FutureWarning about the runtime, printed at import, not about anything this provider does
    (under pytest's warnings-as-errors it would fail the first call instead)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
        import google.api_core  # noqa: F401
        import google.cloud.container_v1  # noqa: F401


def manager_url(url: str) -> str:
    """The instanceGroupManagers URL of a node pool's instance group URL (GKE lists the managers; be lenient)."""
    return url.replace("/instanceGroups/", "/instanceGroupManagers/")


def compute_attempt(session: Any, method: str, url: str, body: Any, timeout: float) -> dict[str, Any]:
    """One Compute REST request; a non-2xx answer raised as google-api-core's exception for its status."""
    load_google()
    from google.api_core import exceptions

    response = session.request(method, url, json=body, timeout=timeout)
    if response.status_code >= 300:
        raise exceptions.from_http_response(response)
    data = response.json() if response.content else {}
    return data if isinstance(data, dict) else {}


def _google_error(exc: Any) -> tuple[str, str]:
    """Google's status name (``NOT_FOUND``) and message from the JSON error body, else what the exception says."""
    try:
        body = exc.response.json()
        error = body.get("error", {}) if isinstance(body, dict) else {}
    except Exception:  # noqa: BLE001 - no body, or not JSON: fall back on the exception
        error = {}
    code = error.get("status") or getattr(exc, "reason", None) or type(exc).__name__
    return str(code), str(error.get("message") or exc.message or "")


def classify(exc: Exception, what: str) -> Exception:
    """A Google error as Transient (retry now) or one of ours with Google's status and message."""
    import requests
    load_google()
    from google.api_core import exceptions
    from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError

    if isinstance(exc, exceptions.GoogleAPICallError):
        status = int(exc.code or 0)
        reason, said = _google_error(exc)
        busy = status in _BUSY_STATUS or (status == 400 and "operation" in said.lower())
        return refusal(what, status, reason, said, said="Google answered", busy=busy, cloud="gke")
    if isinstance(exc, DefaultCredentialsError):
        return PermanentError(f"{what}: no Google credentials ({type(exc).__name__}); set "
                              "GOOGLE_APPLICATION_CREDENTIALS or use workload identity", code=Code.NO_CREDENTIALS,
                              cloud_code=type(exc).__name__)
    if isinstance(exc, RefreshError):
        return PermanentError(f"{what}: Google credentials could not get a token ({type(exc).__name__})",
                              code=Code.NO_CREDENTIALS, cloud_code=type(exc).__name__)
    if isinstance(exc, AnswerTooLarge):  # Google may have acted: not again
        return PermanentError(f"{what}: Google {exc}", code=Code.BAD_ANSWER, cloud_code=str(exc.status))
    if isinstance(exc, (TransportError, requests.ConnectionError, requests.Timeout)):
        return Transient(f"no answer from Google ({type(exc).__name__})")
    return exc
