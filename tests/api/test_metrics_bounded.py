"""/metrics stays bounded (issue 15, item 8): pool names read from alerts that the config does not have count under
one label value, and label values are capped."""
from __future__ import annotations

from typing import Any

from tests.support import am_alert, am_payload, make_app, post


def test_two_thousand_unknown_pools_keep_metrics_bounded(tmp_path: Any) -> None:
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="k", autoscaler_pool="gpu",
                                                              autoscaler_action="scale_out")))
    post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="u0", autoscaler_pool="nope",
                                                              autoscaler_action="scale_out")))
    before = len(client.get("/metrics").data)
    for batch in range(4):
        alerts = [am_alert(fingerprint=f"u{batch}-{i}", autoscaler_pool=f"pool-{batch}-{i}-" + "x" * 200,
                           autoscaler_action="scale_out") for i in range(500)]
        assert post(client, "/webhook/alertmanager", am_payload(*alerts)).status_code == 200
    text = client.get("/metrics").get_data(as_text=True)
    assert len(text) - before < 200, (before, len(text))
    assert 'pool="_unknown"' in text and 'pool="gpu"' in text
    assert "pool-0-0" not in text
    unknown = [line for line in text.splitlines()
               if line.startswith("gpu_autoscaler_decisions_total{") and 'pool="_unknown"' in line]
    assert unknown == ['gpu_autoscaler_decisions_total{action="scale_out",outcome="unknown_pool",'
                       'pool="_unknown"} 2001.0']


def test_reasons_stay_short_whatever_the_alerts_say(tmp_path: Any) -> None:
    """A notification of 300 distinct alert names (within the 1 MiB body limit) asking for a 2,000-character pool
    name: one short reason."""
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    alerts = [am_alert(f"Alert{i}-" + "n" * 100, fingerprint=f"r{i}", autoscaler_pool="p" * 2000,
                       autoscaler_action="scale_out") for i in range(300)]
    decision = post(client, "/webhook/alertmanager", am_payload(*alerts)).get_json()["decisions"][0]
    assert decision["outcome"] == "unknown_pool"
    assert len(decision["reason"]) < 4000 and decision["reason"].count("Alert") == 20
    assert "and 280 more" in decision["reason"]
