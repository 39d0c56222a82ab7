"""check-config reports every problem in one run (issue 15, item 14): field errors, cross-field rules and the
providers' sections together; and warns (exit 0) where the cloud allows less than the config asks (item 15)."""
from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.__main__ import main

BROKEN = """
server:
  auth: {bearer_tokens: [{token: abcdefgh1, name: a, pools: [ghost]}, {token: abcdefgh2, name: a}]}
rules:
  - {match: {alertname: X}, pool: nowhere, action: scale_out}
pools:
  - {name: gpu, provider: simulated, min: 3, max: 1}
  - {name: gpu, provider: simulated, min: 0, max: 2, simulated: {initial_count: -1}}
  - {name: hook, provider: webhook, min: 0, max: 2, webhook: {url: "ftp://x"}}
"""


def test_every_problem_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BROKEN)
    assert main(["check-config", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "pools[0].max: must be >= min (3)"  # a field error ...
    for expected in ("pools: duplicate pool names: gpu",  # ... and every cross-field rule beside it
                     "rules[0].pool: no pool named 'nowhere'",
                     "server.auth.bearer_tokens[0].pools: no pool named 'ghost'",
                     "server.auth.bearer_tokens[1].name: duplicate credential name 'a' "
                     "(also server.auth.bearer_tokens[0])",
                     "pools[1].simulated.initial_count: Input should be greater than or equal to 0"):
        assert expected in lines
    assert any(line.startswith("pools[2].webhook.url: ") for line in lines)
    assert len(lines) == len(set(lines)) == 7


@pytest.mark.parametrize("value", [".nan", ".inf", "1.0e+999", "'" + "9" * 400 + "s'"])
def test_non_finite_durations_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    """A NaN max_skew would let any HMAC timestamp through (nan compares false with everything)."""
    path = tmp_path / "c.yaml"
    path.write_text(f"server:\n  auth: {{grafana_hmac: {{secret: abcdefgh1, timestamp_header: X-Ts, "
                    f"max_skew: {value}}}}}\npools:\n  - {{name: p, provider: simulated, min: 0, max: 1}}\n")
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().err.strip() == "server.auth.grafana_hmac.max_skew: must be a finite duration"


def test_short_secrets_are_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server:\n  auth: {bearer_tokens: [abc, long-enough-1], basic: [{username: u, password: pw}]}\n"
                    "pools:\n  - {name: p, provider: simulated, min: 0, max: 1}\n")
    assert main(["check-config", str(path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1] for line in err] == [" server.auth.bearer_tokens[0].token",
                                                     " server.auth.basic[0].password"]


def test_a_pools_provider_section_is_reported_beside_its_own_limits(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """One pool wrong twice (its limits and its provider's section): both in one run, not the section only once
    the limits are fixed."""
    path = tmp_path / "c.yaml"
    path.write_text("server: {auth: {bearer_tokens: [long-enough-1]}}\n"
                    "pools:\n  - {name: gpu, provider: simulated, min: 3, max: 1, simulated: {initial_count: -1},"
                    " simulatd: {}}\n")
    assert main(["check-config", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["pools[0].max: must be >= min (3)",
                     "pools[0].simulatd: unknown key (is the provider 'simulatd'?)",
                     "pools[0].simulated.initial_count: Input should be greater than or equal to 0"], lines
