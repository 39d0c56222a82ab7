"""The self-monitoring rules pass promtool, their alerts fire on the metrics we export, logs are JSON lines."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.servers import ROOT, Service
from tests.support import AUTH, FakeClock, am_alert, am_payload, config, make_app

RULES = ROOT / "deploy" / "prometheus" / "autoscaler-self-rules.yml"

PROMTOOL_TESTS = """
rule_files: [RULES]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'gpu_autoscaler_pool_paused{pool="gpu"}'
        values: '1x90'
      - series: 'gpu_autoscaler_pool_paused{pool="spare"}'
        values: '0x90'
      - series: 'gpu_autoscaler_store_up{instance="a"}'
        values: '1 1 0x10'
      - series: 'gpu_autoscaler_decisions_total{pool="gpu",action="scale_out",outcome="skipped_backoff"}'
        values: '0+1x90'
      - series: 'gpu_autoscaler_decisions_total{pool="spare",action="scale_out",outcome="skipped_backoff"}'
        values: '0+1x90'
      - series: 'gpu_autoscaler_decisions_total{pool="spare",action="scale_out",outcome="scaled"}'
        values: '0+1x90'
      - series: 'gpu_autoscaler_pool_view_age_seconds{pool="gpu"}'
        values: '0+60x30'
      - series: 'gpu_autoscaler_pool_view_age_seconds{pool="spare"}'
        values: '0x30'
      - series: 'gpu_autoscaler_pool_short{pool="gpu"}'
        values: '1x40 0x50'
      - series: 'gpu_autoscaler_pool_short{pool="spare"}'
        values: '0x20 1x10 0x60'
      - series: 'gpu_autoscaler_pool_short_window_seconds{pool="gpu"}'
        values: '600x90'
      - series: 'gpu_autoscaler_pool_short_window_seconds{pool="spare"}'
        values: '600x90'
    alert_rule_test:
      - eval_time: 30m
        alertname: GPUAutoscalerPoolPaused
        exp_alerts: []
      - eval_time: 70m
        alertname: GPUAutoscalerPoolPaused
        exp_alerts:
          - exp_labels: {severity: warning, pool: gpu}
      - eval_time: 6m
        alertname: GPUAutoscalerStoreDown
        exp_alerts:
          - exp_labels: {severity: critical, instance: a}
      - eval_time: 8m
        alertname: GPUAutoscalerCloudViewStale
        exp_alerts: []
      - eval_time: 15m
        alertname: GPUAutoscalerCloudViewStale
        exp_alerts:
          - exp_labels: {severity: warning, pool: gpu}
      - eval_time: 12m
        alertname: GPUAutoscalerPoolShortOfCapacity
        exp_alerts: []
      - eval_time: 25m
        alertname: GPUAutoscalerPoolShortOfCapacity
        exp_alerts:
          - exp_labels: {severity: warning, pool: gpu}
      - eval_time: 60m
        alertname: GPUAutoscalerPoolShortOfCapacity
        exp_alerts: []
      - eval_time: 80m
        alertname: GPUAutoscalerNotScalingUnderDemand
        exp_alerts:
          - exp_labels: {severity: warning, pool: gpu}
"""


def _render(template: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        template = template.replace("{{ $labels.%s }}" % key, value)
    return template


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    return tool


def test_rules_pass_promtool_check() -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_rules_fire_when_they_should(tmp_path: Path) -> None:
    rules = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load(PROMTOOL_TESTS.replace("RULES", str(RULES)))
    for case in tests["tests"][0]["alert_rule_test"]:
        for exp in case["exp_alerts"]:  # the annotations, rendered with the alert's labels
            notes = rules[case["alertname"]]["annotations"]
            exp["exp_annotations"] = {k: _render(v, exp["exp_labels"]) for k, v in notes.items()}
    spec = tmp_path / "rules_test.yml"
    spec.write_text(yaml.safe_dump(tests))
    result = subprocess.run([_promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_metric_the_rules_use_is_exported(tmp_path: Path) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db", FakeClock()).test_client()
    client.post("/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH)
    client.post("/api/v1/pools/spare/pause", json={}, headers=AUTH)
    text = client.get("/metrics").get_data(as_text=True)
    for name in ("gpu_autoscaler_store_up 1.0", 'gpu_autoscaler_pool_paused{pool="spare"} 1.0',
                 "gpu_autoscaler_pools_paused 1.0", 'gpu_autoscaler_pool_backoff_remaining_seconds{pool="gpu"}',
                 'gpu_autoscaler_pool_last_scale_timestamp_seconds{pool="gpu"}',
                 'gpu_autoscaler_pool_view_age_seconds{pool="gpu"}', 'gpu_autoscaler_pool_short{pool="gpu"} 0.0',
                 'gpu_autoscaler_pool_short_window_seconds{pool="gpu"} 600.0',
                 'gpu_autoscaler_decisions_total{action="scale_out",outcome="scaled",pool="gpu"} 1.0',
                 "# TYPE gpu_autoscaler_provider_call_seconds histogram",
                 "# TYPE gpu_autoscaler_provider_errors_total counter",
                 "# TYPE gpu_autoscaler_event_sink_dropped_total counter"):
        assert name in text, name


@pytest.mark.slow
def test_log_format_json_gives_one_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    cfg = config(f"sqlite:///{tmp_path}/s.db")
    cfg["pools"][0]["dry_run"] = True  # the DRY-RUN banner goes through the same formatter
    path.write_text(yaml.safe_dump(cfg))
    env = {"AUTOSCALER_CONFIG": str(path), "LOG_FORMAT": "json", "GUNICORN_ACCESS_LOG": "-"}
    with Service(None, tmp_path, workers=2, env=env, graceful_timeout=2) as server:
        requests.post(f"{server.url}/webhook/alertmanager", json=am_payload(am_alert()), headers=AUTH, timeout=5)
        requests.post(f"{server.url}/api/v1/pools/spare/scale", json={"action": "scale_out"}, headers=AUTH, timeout=5)
        requests.get(f"{server.url}/api/v1/pools", headers={"Authorization": "Bearer wrong"}, timeout=5)
        requests.post(f"{server.url}/webhook/grafana", data="{not json", headers=AUTH, timeout=5)
    log = server.read_log()
    lines = [line for line in log.splitlines() if line.strip()]
    objects = []
    for line in lines:
        obj = json.loads(line)  # every line, gunicorn's own included
        assert isinstance(obj, dict) and {"time", "level", "logger"} <= set(obj)
        objects.append(obj)
    decisions = [o for o in objects if o.get("msg") == "decision"]
    assert {d["outcome"] for d in decisions} == {"dry_run", "scaled"}
    assert {"id", "pool", "source", "action", "outcome", "from", "to", "reason", "alerts"} <= set(decisions[0])
    assert any(o["logger"] == "gunicorn.access" for o in objects)
    assert any("DRY-RUN" in o.get("message", "") for o in objects)
    assert "hardening-token-7" not in log
