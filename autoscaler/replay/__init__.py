"""The what-if replay: ``python -m autoscaler replay --config FILE --trace TRACE.csv --out DIR``."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, TypeVar

from autoscaler.config.load import ConfigError, load_replay_config
from autoscaler.config.load import Settings
from autoscaler.logjson import escape_lines
from autoscaler.replay.peers import PeerRun, PeerSettings, cluster_autoscaler, peer_figures
from autoscaler.replay.report import summary, write_all
from autoscaler.replay.sim import fixed_step, replay_pool, replay_route, simulate, static_peak, victims_of
from autoscaler.replay.trace import Trace
from autoscaler.replay.trace import ReplayError, load_trace

__all__ = ["ReplayError", "command", "replay", "run_replay"]


def peers(settings: Settings, trace: Trace, overprovision: int = 1) -> dict[str, PeerRun]:
    """cluster-autoscaler on the same trace, without and with ``overprovision`` nodes of pause pods: one node
    group with the replayed pools' limits and starting nodes added up and the preferred pool's boot time."""
    members = replay_route(settings)[1]
    specs = [settings.pools[name] for name in members]
    ca = PeerSettings(boot=float(specs[0].provider_settings.provision_seconds), low=sum(s.min for s in specs),
                      high=sum(s.max for s in specs), initial=sum(s.provider_settings.initial_count for s in specs))
    return {"cluster_autoscaler": cluster_autoscaler(trace.demand, trace.start, ca),
            "cluster_autoscaler_overprovisioned": cluster_autoscaler(
                trace.demand, trace.start, PeerSettings(**{**ca.__dict__, "overprovision": overprovision}))}


def run_replay(config_path: str, trace_path: str, out_dir: str, overprovision: int = 1) -> dict[str, Any]:
    """Replay a trace and write its outputs; ConfigError or ReplayError when an input is bad."""
    _, settings = load_replay_config(config_path)
    pool = replay_pool(settings)
    trace = load_trace(trace_path)
    run = simulate(settings, trace)
    victims = victims_of(settings, pool)
    cloud = run if victims == "cloud" else simulate(settings, trace, victims="cloud")
    idle = simulate(settings, trace, victims="idle") if victims == "movable" else None
    spec = settings.pools[pool]
    data = summary(run, static_peak(trace, run.gpus_per_node), simulate(fixed_step(settings), trace, use_steps=False),
                   cloud, victims, idle=idle, low=spec.min)
    others = peers(settings, trace, overprovision)
    for name, peer in others.items():
        data["baselines"][name] = {**peer_figures(peer, run.gpus_per_node, data["foresight_node_hours"]),
                                   "overprovision": overprovision if name.endswith("overprovisioned") else 0}
    title = (f"{pool}: scale_out {spec.scale_out.mode.value}, scale_in {spec.scale_in.mode.value} | "
             f"{data['node_hours']:.1f} node-h (static peak {data['baselines']['static_peak']['node_hours']:.1f}),"
             f" saturated {data['saturated_minutes']} of {data['minutes']} min, unmet "
             f"{data['unmet_demand_gpu_minutes']:.0f} GPU-min, interrupted "
             f"{data['interrupted_node_minutes']:.1f} node-min (victims {victims})")
    write_all(out_dir, run, data, title, others, settings)
    return data


def peer_line(peer: dict[str, Any]) -> str:
    ratio = f" ({peer['vs_foresight']:.2f}x)" if peer["vs_foresight"] is not None else ""
    return (f"{peer['node_hours']:.1f} node-h{ratio}, saturated {peer['saturated_minutes']} min, "
            f"{peer['direction_changes']} direction changes")


T = TypeVar("T")


def command(work: Callable[[], T], config_path: str, out_dir: str) -> T | None:
    """A replay command's work (``replay``, ``replay --tune``); None once each problem is printed on its own line
    (a config problem after the file's name; control characters escaped), for the command to exit 1."""
    try:
        return work()
    except ConfigError as exc:
        for problem in exc.problems:
            print(escape_lines(f"{config_path}: {problem}"), file=sys.stderr)
    except ReplayError as exc:
        print(escape_lines(str(exc)), file=sys.stderr)
    except OSError as exc:
        print(escape_lines(f"{out_dir}: cannot write: {exc.strerror}"), file=sys.stderr)
    return None


def replay(config_path: str, trace_path: str, out_dir: str, overprovision: int = 1) -> int:
    """The CLI: exit 0 with a one-line result, or 1 with each problem on its own line."""
    started = time.monotonic()
    data = command(lambda: run_replay(config_path, trace_path, out_dir, overprovision), config_path, out_dir)
    if data is None:
        return 1
    static = data["baselines"]["static_peak"]
    step = data["baselines"]["fixed_step"]
    ratio = f"{data['vs_foresight']:.2f}x " if data["vs_foresight"] is not None else ""
    print(f"replayed {data['minutes']} min in {time.monotonic() - started:.1f}s -> {out_dir}: "
          f"{data['node_hours']:.1f} node-h ({ratio}the foresight limit {data['foresight_node_hours']:.1f}; "
          f"static peak {static['node_hours']:.1f}, fixed step "
          f"{step['node_hours']:.1f}), saturated {data['saturated_minutes']} min (fixed step "
          f"{step['saturated_minutes']}), unmet demand {data['unmet_demand_gpu_minutes']:.0f} GPU-min, "
          f"{data['scale_actions']} scale actions, interrupted work "
          f"{data['interrupted_node_minutes']:.1f} node-min with victims {data['victims']} "
          f"(cloud picking the newest: {data['interrupted_node_minutes_by_victims']['cloud']:.1f}), "
          f"{data['evictions']} evictions; cluster-autoscaler {peer_line(data['baselines']['cluster_autoscaler'])}, "
          f"with {overprovision} node(s) of pause pods "
          f"{peer_line(data['baselines']['cluster_autoscaler_overprovisioned'])}")
    return 0
