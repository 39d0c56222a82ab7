"""Unauthenticated probes and metrics."""
from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify
from prometheus_client import CONTENT_TYPE_LATEST

from autoscaler import __version__
from autoscaler.store import StoreUnavailable

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    """200 while the process serves, with the version it runs."""
    return jsonify({"status": "ok", "version": __version__})


@bp.get("/version")
def version() -> Response:
    """The running version: the image tag, the chart's appVersion and CHANGELOG.md's newest release agree."""
    return jsonify({"version": __version__})


@bp.get("/readyz")
def readyz() -> Response:
    """200 when the store answers, else 503."""
    try:
        current_app.extensions["autoscaler"].store.ping()
    except StoreUnavailable as exc:
        resp = jsonify({"status": "unavailable", "error": str(exc)})
        resp.status_code = 503
        resp.headers["Retry-After"] = "5"
        return resp
    return jsonify({"status": "ready"})


@bp.get("/metrics")
def metrics() -> Response:
    """Prometheus text format, summed across gunicorn workers."""
    body = current_app.extensions["autoscaler"].metrics.render()
    return Response(body, mimetype=CONTENT_TYPE_LATEST.split(";")[0], headers={"Content-Type": CONTENT_TYPE_LATEST})
