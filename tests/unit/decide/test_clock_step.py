"""The wall clock stepped back (NTP) after a scale-out: no remaining cooldown is held or shown longer than its
configured length (the leases' and dedup windows' side: tests/unit/store/test_store_clocks.py)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from tests.support import AUTH, FakeClock, am_alert, am_payload, make_app, post

COOLDOWN = 120.0  # scale_out.cooldown
DELAY = 600.0  # scale_in.delay_after_scale_out
STEP = 600.0  # how far back the clock steps


def _stepped_back(tmp_path: Path) -> tuple[FlaskClient, FakeClock, dict[str, Any]]:
    """A scale-out, then the clock 3 s on and STEP back, then a second scale-out alert: the client, the clock and
    that alert's decision."""
    clock = FakeClock()
    pools = [{"name": "gpu", "provider": "simulated", "min": 1, "max": 6, "simulated": {"initial_count": 2},
              "scale_out": {"step": 1, "cooldown": "2m"},
              "scale_in": {"step": 1, "cooldown": "5m", "delay_after_scale_out": "10m"}}]
    client = make_app(f"sqlite:///{tmp_path}/s.db", clock, pools=pools).test_client()
    [first] = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="fp-1"))).get_json()["decisions"]
    assert first["outcome"] == "scaled"
    clock.advance(3)
    clock.advance(-STEP)
    [held] = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="fp-2"))).get_json()["decisions"]
    return client, clock, held


def test_remaining_cooldowns_never_exceed_their_configured_length(tmp_path: Path) -> None:
    client, clock, held = _stepped_back(tmp_path)
    left = float(re.search(r"(\d+)s left", held["reason"]).group(1))  # type: ignore[union-attr]
    idle = am_alert("GPUIdle", fingerprint="fp-3")
    [held_in] = post(client, "/webhook/alertmanager", am_payload(idle)).get_json()["decisions"]
    left_in = float(re.search(r"(\d+)s left", held_in["reason"]).group(1))  # type: ignore[union-attr]
    cooldown = client.get("/api/v1/pools/gpu", headers=AUTH).get_json()["cooldown"]
    print(f"after the step back: scale-out {left:.0f}s of {COOLDOWN:.0f}, scale-in {left_in:.0f}s of {DELAY:.0f}; "
          f"pool answer {cooldown}")
    assert held["outcome"] == held_in["outcome"] == "skipped_cooldown"
    assert 0 < left <= COOLDOWN and 0 < left_in <= DELAY
    assert 0 < cooldown["scale_out_remaining_s"] <= COOLDOWN
    assert 0 < cooldown["scale_in_remaining_s"] <= DELAY


def test_a_cooldown_stamped_ahead_of_the_clock_ends_within_its_length(tmp_path: Path) -> None:
    """Held, not only shown: after the clock steps back, the scale-out's stamp reads 600 s ahead; the next decision
    brings it back to now (pool/stamps.py), so the cooldown ends its configured length later, not 600 s more."""
    client, clock, held = _stepped_back(tmp_path)
    assert held["outcome"] == "skipped_cooldown"
    clock.advance(COOLDOWN + 1)  # the whole cooldown from the decision that found the stamp ahead, and no more
    [again] = post(client, "/webhook/alertmanager", am_payload(am_alert(fingerprint="fp-3"))).get_json()["decisions"]
    assert again["outcome"] == "scaled", again["reason"]
