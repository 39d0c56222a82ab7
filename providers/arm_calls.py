"""Azure Resource Manager's answers made readable, for the one retry layer (:mod:`providers.retry`).

The SDK client is built with ``retry_total=0``, so :func:`providers.retry.call` is the only place a call is
repeated. :func:`classify` turns an SDK exception into a :class:`~providers.retry.Transient` (408/429/5xx, a dropped
connection: another attempt now, after ARM's ``Retry-After``) or an error of :mod:`providers.errors` carrying ARM's
code and message, never a credential.
"""
from __future__ import annotations

import json
from typing import Any

from providers.bounded import AnswerTooLarge
from providers.errors import Code, PermanentError
from providers.retry import Transient, clean, parse_retry_after, refusal

#: HTTP statuses ARM answers that are worth another attempt inside the same call.
RETRY_NOW = frozenset({408, 429, 500, 502, 503, 504})
#: 409 codes that mean "the pool is busy with another operation": retry later, not now.
BUSY_CODES = frozenset({"OperationNotAllowed", "AnotherOperationInProgress", "OperationPreempted"})


def arm_error(exc: Any) -> tuple[str | None, str]:
    """ARM's error code and message from an SDK HttpResponseError (body ``{"error": {"code", "message"}}``)."""
    code: str | None = None
    message = ""
    error = getattr(exc, "error", None)
    if error is not None:
        code = getattr(error, "code", None)
        message = getattr(error, "message", "") or ""
    response = getattr(exc, "response", None)
    if (not code or not message) and response is not None:
        try:
            body = json.loads(response.text())
            inner = body.get("error", body) if isinstance(body, dict) else {}
            code = code or inner.get("code")
            message = message or inner.get("message", "")
        except (ValueError, AttributeError, TypeError):
            pass
    if not message:
        message = getattr(exc, "reason", None) or "no error message"
    return code, str(message)


def classify(exc: Exception, what: str) -> Exception:
    """An SDK exception as ``Transient`` (retry now) or one of our errors (stop here)."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
    from azure.core.exceptions import ServiceResponseError

    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, AnswerTooLarge):  # ARM may have acted: not again
        return PermanentError(f"{what}: ARM {inner}", code=Code.BAD_ANSWER, cloud_code=str(inner.status))
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return Transient(f"no answer from ARM ({type(exc).__name__})")
    if isinstance(exc, ClientAuthenticationError) and getattr(exc, "response", None) is None:
        return PermanentError(f"{what}: no Azure credential could get a token ({clean(str(exc.message))})",
                              code=Code.NO_CREDENTIALS, cloud_code="CredentialUnavailable")
    if not isinstance(exc, HttpResponseError):
        return exc
    status = exc.status_code or 0
    code, message = arm_error(exc)
    return refusal(what, status, code, message, said="ARM answered", retry_now=status in RETRY_NOW,
                   busy=status == 409 and code in BUSY_CODES,
                   retry_after=parse_retry_after(getattr(exc.response, "headers", None)), cloud="aks")
