"""The baseline for the intake benchmark: a bare Flask app that only parses the JSON body and answers 200."""
from __future__ import annotations

from flask import Flask, Response, jsonify, request

app = Flask(__name__)


@app.post("/webhook/alertmanager")
def alertmanager_hook() -> Response:
    """Parse the body, count the alerts, answer 200."""
    body = request.get_json(force=True)
    return jsonify({"received": len(body.get("alerts", []))})


@app.get("/healthz")
def healthz() -> Response:
    """Ready as soon as it serves."""
    return jsonify({"status": "ok"})
