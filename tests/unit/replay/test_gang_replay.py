"""The gang replay (docs/gang.md): a trace of all-or-nothing requests through the real engine and reconciler on a
virtual clock, a spot pool that delivers 2 of any size asked, figures checked by hand; a bad row refused by line."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import load_replay_config
from autoscaler.replay.gang import run_gang_replay
from autoscaler.replay.gang_trace import ROW_IS, load_gangs, parse_gangs
from autoscaler.replay.trace import MAX_LINE, MAX_MINUTES, ReplayError
from tests.support.fifo import refused_while_open

T0 = "2026-01-05T00:00:00Z"


def write_config(tmp_path: Path) -> Path:
    """spot: 2 nodes at most, ready 2 min after asked, provision_time 5 min; ondemand: ready after 3 min; ticks
    every minute."""
    def pool(name: str, boot: int, provision: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "provider": "simulated", "min": 0, "max": 8, "node_selector": f"pool={name}",
                "gpus_per_node": 8, "provision_time": provision,
                "simulated": {"initial_count": 0, "provision_seconds": boot, **more}}
    cfg = {"server": {"reconcile_interval": "60s"}, "store": {"url": "sqlite://"}, "rules": [],
           "defaults": {"scale_out": {"step": 1, "cooldown": 0}, "scale_in": {"step": 1, "cooldown": 0}},
           "pools": [pool("spot", 120, "5m", capacity=2), pool("ondemand", 180, "10m")],
           "groups": [{"name": "h100", "pools": ["spot", "ondemand"]}]}
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def write_trace(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "gangs.csv"
    path.write_text("\n".join(("time,nodes,duration",) + rows) + "\n")
    return path


def test_one_gang_of_4_on_a_spot_pool_that_delivers_2(tmp_path: Path) -> None:
    data = run_gang_replay(str(write_config(tmp_path)), str(write_trace(tmp_path, f"{T0},4,1h")),
                           str(tmp_path / "out"))
    atomic, plain = data["atomic"], data["plain"]
    # atomic: spot asked 4 at t=0, busy until 120 s; the 120 s tick reads the cloud's shortfall (2 of 4): the 2
    # nodes (ready at 120) are removed by name at once, on-demand asked 4 at 120, ready at 300: provisioned at the
    # 300 s tick, the job runs an hour; nothing billed while waiting
    assert atomic["outcomes"] == {"provisioned": 1, "rolled_back": 1, "scaled": 3}  # 2 asks + the job's scale-in
    assert atomic["waiting_node_hours"] == 0
    assert atomic["waiting_node_hours_past_provision_time"] == 0
    assert atomic["node_hours"] == pytest.approx(4 * 3600 / 3600)
    assert atomic["mean_start_delay_seconds"] == 300
    # plain: spot asked 4 at 0, delivers 2 (ready 120); the 120 s tick reads the shortfall (busy until then), gives
    # the 2 back and asks on-demand for them (ready 300): the job starts at 300 on 2 spot + 2 on-demand nodes
    assert plain["waiting_node_hours"] == pytest.approx(2 * 180 / 3600)
    assert plain["waiting_node_hours_past_provision_time"] == 0
    assert plain["node_hours"] == pytest.approx((2 * 180 + 4 * 3600) / 3600)
    assert plain["mean_start_delay_seconds"] == 300
    assert (tmp_path / "out" / "summary.json").exists() and (tmp_path / "out" / "requests.csv").exists()


@pytest.mark.parametrize("rows,said", [
    pytest.param([f"{T0},4,1h", f"{T0},zero,1h"], "line 3: nodes 'zero' is not a whole number", id="nodes"),
    pytest.param([f"{T0},4,1h", "2026-01-04T23:00:00Z,1,1h"], "line 3: time 2026-01-04T23:00:00Z is before",
                 id="order"),
    pytest.param([f"{T0},4,soon"], "line 2: duration 'soon'", id="duration"),
    pytest.param([f"{T0},4,1h,8,9"], "line 2: expected 3 columns", id="columns"),
])
def test_a_bad_row_is_refused_with_its_line(tmp_path: Path, rows: list[str], said: str) -> None:
    with pytest.raises(ReplayError) as info:
        run_gang_replay(str(write_config(tmp_path)), str(write_trace(tmp_path, *rows)), str(tmp_path / "out"))
    assert said in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_config_is_the_service_s(tmp_path: Path) -> None:
    _, settings = load_replay_config(str(write_config(tmp_path)))
    assert settings.groups["h100"] == ("spot", "ondemand")


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autoscaler.__main__ import main

    cfg, trace = str(write_config(tmp_path)), str(write_trace(tmp_path, f"{T0},4,1h"))
    assert main(["replay", "--gang", "--config", cfg, "--trace", trace, "--out", str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert "billed while waiting for the rest of a gang 0.00 node-h, 0.00 past provision_time" in said
    bad = str(write_trace(tmp_path, f"{T0},4,1h", f"{T0},0,1h"))
    assert main(["replay", "--gang", "--config", cfg, "--trace", bad, "--out", str(tmp_path / "o2")]) == 1
    assert "gangs.csv line 3: nodes '0' must be from 1 to" in capsys.readouterr().err


def test_overlapping_requests_on_one_pool_finish_and_leave_no_node(tmp_path: Path) -> None:
    """Requests that overlap on the pools (each asked while another's gang waits or its job runs): every one
    starts, and each job's nodes all go when it is done (10 node-h of jobs, little more billed)."""
    rows = (f"{T0},4,1h", "2026-01-05T00:10:00Z,2,1h", "2026-01-05T00:20:00Z,4,1h", "2026-01-05T00:21:00Z,2,1h")
    data = run_gang_replay(str(write_config(tmp_path)), str(write_trace(tmp_path, *rows)), str(tmp_path / "out"))
    for mode in ("atomic", "plain"):
        figures = data[mode]
        assert figures["started"] == figures["requests"] == 4, (mode, figures)
        assert 12 <= figures["node_hours"] <= 12.5, (mode, figures)  # 12 node-h of jobs, boots waited a little
        assert figures["waiting_node_hours_past_provision_time"] == 0


def test_a_line_over_the_bound_is_refused_once_that_much_is_read(tmp_path: Path) -> None:
    """A FIFO whose writer sends the header, a good row and then a line that never ends (bytes, no newline, the pipe
    kept open): the reader refuses it once MAX_LINE bytes of it are read, as the demand trace does; a reader that
    wants the whole line first never returns."""
    fifo = tmp_path / "gangs.csv"
    said = refused_while_open(fifo, f"time,nodes,duration\n{T0},4,1h\n{T0}," + "1" * (4 * MAX_LINE), load_gangs)
    assert said == f"{fifo} line 3: longer than {MAX_LINE} bytes ({ROW_IS})"


def test_a_gang_trace_longer_than_the_row_cap_is_refused_at_the_first_row_over_it() -> None:
    """At most MAX_MINUTES requests (one a minute for a leap year): the next row is refused naming its line,
    nothing after it read."""
    def rows(count: int) -> Iterator[str]:
        yield "time,nodes,duration\n"
        yield from itertools.repeat(f"{T0},1,1h\n", count)
        raise AssertionError("read past the first row over the cap")

    with pytest.raises(ReplayError, match=rf"^g\.csv line {MAX_MINUTES + 2}: more than {MAX_MINUTES:,} requests"):
        parse_gangs(rows(MAX_MINUTES + 1), "g.csv")
