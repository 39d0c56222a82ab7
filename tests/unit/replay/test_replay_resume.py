"""A replay that pauses and goes on (successive halving's longer rungs go on from the shorter ones' pauses): the
same minutes and decisions as one replay from the start, and the tuner's scores the same as replaying again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import ConfigError
from autoscaler.config.load import build_settings
from autoscaler.replay.sim import Minute, Replay, Run, simulate
from autoscaler.replay.space import describe
from autoscaler.replay.trace import Trace, parse_time
from autoscaler.replay.tune import PARENT_CHECK, Workers, _init, evaluate, retain
from autoscaler.store.memory import MemoryStore
from bench.traces.make_traces import generate
from tests.support.replay_cases import BASE

T0 = parse_time("2025-01-06T00:00:00Z")
ROOT = Path(__file__).resolve().parents[3]


def _settings() -> Any:
    return build_settings(yaml.safe_load(BASE), env={})


def _demand(days: int) -> tuple[float, ...]:
    return tuple(round(d, 2) for d in generate("diurnal_inference", days=days, seed=7))


def _decided(run: Run) -> list[tuple[float, str, str, int | None, int | None, str]]:
    return [(t, d.outcome.value, d.action.value if d.action else "", d.from_, d.to, d.reason) for t, d in run.decisions]


def test_a_paused_replay_goes_on_as_one_replay_from_the_start() -> None:
    settings, demand = _settings(), _demand(2)
    whole = simulate(settings, Trace(T0, demand), store=MemoryStore())
    cut = simulate(settings, Trace(T0, demand[:1440]), store=MemoryStore())
    replay = Replay(settings, Trace(T0, demand), store=MemoryStore())
    first = replay.run(until=1440)
    assert replay.paused_at == 1440 and replay.done is None
    assert first.minutes == cut.minutes and _decided(first) == _decided(cut)  # as the trace cut at the pause
    assert len(_decided(whole)) > len(_decided(first)) > 3  # something was decided on either side of the pause
    rest = replay.run()
    assert rest.minutes == whole.minutes and _decided(rest) == _decided(whole)
    assert first.minutes == whole.minutes[:1440]  # the earlier run is left as it was
    assert replay.run() is rest  # ended: the same run again


def test_a_replay_stopped_early_goes_on_from_where_it_stopped() -> None:
    settings, demand = _settings(), _demand(1)
    whole = simulate(settings, Trace(T0, demand), store=MemoryStore())
    replay = Replay(settings, Trace(T0, demand), store=MemoryStore())

    def at_500(minute: Minute) -> bool:
        return minute.time >= T0 + 500 * 60

    stopped = replay.run(stop=at_500)
    assert stopped.stopped and len(stopped.minutes) == 501 and stopped.minutes == simulate(
        settings, Trace(T0, demand), store=MemoryStore(), stop=at_500).minutes
    rest = replay.run()
    assert not rest.stopped and rest.minutes == whole.minutes and _decided(rest) == _decided(whole)


def _scored_alike(a: Any, b: Any) -> bool:
    return (a.node_hours, a.saturated_minutes, a.direction_changes, a.minutes, a.stopped, a.days, a.day_changes,
            a.decisions, a.interrupted) == (b.node_hours, b.saturated_minutes, b.direction_changes, b.minutes,
                                            b.stopped, b.days, b.day_changes, b.decisions, b.interrupted)


def test_a_longer_rung_goes_on_from_the_shorter_one_with_the_same_score() -> None:
    _init(yaml.safe_load(BASE), {}, "gpu", Trace(T0, _demand(3)))
    base = describe(_settings(), "gpu")
    first = evaluate(base, 0, 1440, 10_000, None, "", None, True)
    assert first.resumed == (0, 0) and first.minutes == 1440
    longer = evaluate(base, 0, 2880, 10_000, None, "", None, True)
    assert longer.resumed == (1440, first.decisions)  # the first day was not replayed again
    whole = evaluate(base, 0, 4320, None, None)  # the last rung: from the second's pause, to the end
    assert whole.resumed[0] == 2880
    retain(set())
    assert _scored_alike(longer, evaluate(base, 0, 2880, 10_000, None))
    again = evaluate(base, 0, 4320, None, None)
    assert again.resumed == (0, 0) and _scored_alike(whole, again)


def test_a_stopped_candidate_goes_on_or_is_replayed_as_its_new_early_stop_says() -> None:
    _init(yaml.safe_load(BASE), {}, "gpu", Trace(T0, _demand(2)))
    base = describe(_settings(), "gpu")
    full = evaluate(base, 0, 2880, None, None)
    stopped = evaluate(base, 0, 1440, 10_000, full.node_hours / 8, "", None, True)
    assert stopped.stopped == "node_hours" and stopped.minutes < 1440
    # a roomier bound: on from the stop, the same as from the start
    roomy = evaluate(base, 0, 2880, 10_000, full.node_hours * 2, "", None, True)
    retain(set())
    assert roomy.resumed[0] == stopped.minutes and _scored_alike(roomy, evaluate(base, 0, 2880, 10_000,
                                                                                 full.node_hours * 2))
    # a tighter bound would have stopped it sooner: replayed from the start, stopped where a fresh replay stops
    evaluate(base, 0, 1440, 10_000, full.node_hours / 8, "", None, True)
    tight = evaluate(base, 0, 2880, 10_000, full.node_hours / 16)
    assert tight.resumed == (0, 0) and tight.stopped == "node_hours"
    assert _scored_alike(tight, evaluate(base, 0, 2880, 10_000, full.node_hours / 16))


def test_a_worker_error_reaches_the_caller() -> None:
    demand = _demand(1)
    pool = Workers(2, (yaml.safe_load(BASE), {}, "gpu", Trace(T0, demand), {}))
    try:
        good = describe(_settings(), "gpu")
        bad = {**good, "scale_out.cooldown": -5}  # not a valid config: build_settings refuses it
        with pytest.raises(ConfigError):
            pool.map([(0, good, 0, 60, None, None), (1, bad, 0, 60, None, None)])
        assert [i for i, _ in pool.map([(0, good, 0, 60, None, None), (1, good, 0, 30, None, None)])] == [0, 1]
    finally:
        pool.shutdown()


def test_a_worker_that_dies_is_said_not_waited_for() -> None:
    pool = Workers(2, (yaml.safe_load(BASE), {}, "gpu", Trace(T0, _demand(1)), {}))
    try:
        pid = pool.pids[0]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="tune worker process ended"):
            pool.map([(i, describe(_settings(), "gpu"), 0, 1440, None, None) for i in range(4)])
    finally:
        pool.shutdown()


def test_past_max_paused_a_candidate_is_replayed_from_the_start_with_the_same_score(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autoscaler.replay import tune
    monkeypatch.setattr(tune, "MAX_PAUSED", 1)
    _init(yaml.safe_load(BASE), {}, "gpu", Trace(T0, _demand(2)))
    base = describe(_settings(), "gpu")
    other = {**base, "scale_in.cooldown": 1800}
    evaluate(base, 0, 1440, None, None, "", None, True)
    evaluate(other, 0, 1440, None, None, "", None, True)  # over the limit: not paused
    assert evaluate(base, 0, 2880, None, None).resumed[0] == 1440
    later = evaluate(other, 0, 2880, None, None)
    assert later.resumed == (0, 0) and _scored_alike(later, evaluate(other, 0, 2880, None, None))


def test_ctrl_c_is_the_parents_a_worker_goes_on() -> None:
    """Ctrl-C reaches the whole process group; the parent handles it (the tune stops, its workers shut down), so a
    worker that gets it goes on rather than dying with a traceback of its own."""
    pool = Workers(2, (yaml.safe_load(BASE), {}, "gpu", Trace(T0, _demand(1)), {}))
    try:
        pool.map([(i, describe(_settings(), "gpu"), 0, 30, None, None) for i in range(4)])  # both workers serving
        for pid in pool.pids:
            assert pid is not None
            os.kill(pid, signal.SIGINT)
        done = pool.map([(i, describe(_settings(), "gpu"), 0, 60, None, None) for i in range(4)])
        assert [i for i, _ in done] == [0, 1, 2, 3]
    finally:
        pool.shutdown()


def test_workers_of_a_tune_killed_outright_end_by_themselves(tmp_path: Path) -> None:
    """A tune killed with SIGKILL cannot shut its workers down: they see it gone and end within PARENT_CHECK."""
    script = tmp_path / "tune_then_die.py"
    script.write_text(
        "import os, sys, yaml\n"
        "from autoscaler.replay.trace import Trace, parse_time\n"
        "from autoscaler.replay.tune import Workers\n"
        "from tests.support.replay_cases import BASE\n"
        "pool = Workers(2, (yaml.safe_load(BASE), {}, 'gpu', Trace(parse_time('2025-01-06T00:00:00Z'), (1.0,) * 60),"
        " {}))\n"
        "print(' '.join(str(p) for p in pool.pids), flush=True)\n"
        "os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 4 * PARENT_CHECK + 5
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    """Whether the process is there and not a zombie (an orphan's exit may wait for a reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
