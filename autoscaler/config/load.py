"""Load the YAML config, substitute ``${VAR}`` (``autoscaler/config/envsubst.py``), validate it into frozen typed
objects.

Every problem is reported with its path in the file, e.g. ``pools[1].max: must be >= min (3)``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler.config import validation, yaml_strict
from autoscaler.config.envsubst import substitute
from autoscaler.models import DirectionPolicy, Headroom, Mode, PoolSpec, Schedule
from autoscaler.config.common import DEFAULT_MOVABLE_OWNERS
from autoscaler.config.node_repair import repair_policy
from autoscaler.config import (AuthConfig, Config, DirectionConfig, PoolConfig, credential_problems,
                                 group_problems, reference_problems)
from autoscaler.config.cluster import cluster_problems
from autoscaler.config.pools import floors_above_max, needs_gpus_per_node

class ConfigError(Exception):
    """The config is invalid; ``problems`` holds one line per problem, each starting with its path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    """The validated config plus each pool's effective spec (defaults merged, provider settings typed) and each
    fallback group's pools, most preferred first."""

    config: Config
    pools: dict[str, PoolSpec]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)


#: scale_in keys that are not the direction's policy
_NODE_KEYS = {"victims", "drain_timeout", "movable_owners", "forced_removal"}
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$")
DEFAULT_PROVISION_TIME = 600.0  # pools[].provision_time left out (a simulated pool: its provision_seconds)


def _direction(base: DirectionConfig, override: DirectionConfig) -> DirectionPolicy:
    merged = {**base.model_dump(exclude_none=True, exclude=_NODE_KEYS),
              **override.model_dump(exclude_none=True, exclude=_NODE_KEYS)}
    if "mode" in merged:
        merged["mode"] = Mode(merged["mode"])
    if "headroom" in merged:
        merged["headroom"] = headroom(merged["headroom"])
    return DirectionPolicy(**merged)


def headroom(data: dict[str, Any] | None) -> Headroom | None:
    """A validated ``headroom`` mapping (one of nodes, gpus, fraction) as the core's Headroom."""
    if data is None:
        return None
    return Headroom(**{k: v for k, v in data.items() if v is not None})


def build_settings(raw: Any, env: dict[str, str] | None = None, *, replay: bool = False) -> Settings:
    """Validate a parsed YAML document; ConfigError lists every problem. ``replay``: read for the what-if replay,
    whose in-memory cluster stands in for ``kubernetes:`` (see :func:`offline`)."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): must be a mapping of config keys"])
    data = substitute(raw, dict(os.environ) if env is None else env, problems)
    try:
        config = Config.model_validate(data, context=_context())
    except ValidationError as exc:
        # cross-field checks on the whole file already start with their own path
        problems.extend(validation.problems(exc))
        problems.extend(_beside_field_errors(data))
        raise ConfigError(_unique(problems)) from None
    pools: dict[str, PoolSpec] = {}
    groups = {g.name: tuple(g.pools) for g in config.groups}
    group_of = {member: name for name, members in groups.items() for member in members}
    for index, pool in enumerate(config.pools):
        settings, pool_problems = provider_settings(pool, index)
        problems += pool_problems
        pools[pool.name] = PoolSpec(
            name=pool.name,
            provider=pool.provider,
            min=pool.min,
            max=pool.max,
            dry_run=pool.dry_run,
            scale_out=_direction(config.defaults.scale_out, pool.scale_out),
            scale_in=_direction(config.defaults.scale_in, pool.scale_in),
            dedup_window=pool.dedup_window if pool.dedup_window is not None else config.defaults.dedup_window,
            provider_settings=settings,
            gpus_per_node=pool.gpus_per_node,
            provision_time=_provision_time(pool, settings),
            schedules=tuple(Schedule(w.cron, w.duration, w.min, w.timezone,
                                     headroom(w.headroom.model_dump()) if w.headroom else None)
                            for w in pool.schedules),
            short_for=pool.capacity.short_for,
            node_labels=tuple(sorted(pool.node_labels.items())),
            group=group_of.get(pool.name, ""),
            cluster=config.cluster_of(pool),
            repair=_repair(config, index, pool, settings, problems, replay),
            **_node_aware(config, index, pool, settings, problems, replay),
        )
        if pool.repair is not None and config.clustered and not pools[pool.name].node_selector:
            problems.append(f"pools[{index}].node_selector: required with repair: (provider {pool.provider} has no "
                            "default): a repair checks that the node it is told of is the pool's")
        if needs_gpus_per_node(pools[pool.name].scale_out.mode, pool.gpus_per_node):
            problems.append(_NO_GPUS_PER_NODE.format(index=index))
    if problems:
        raise ConfigError(_unique(problems))
    return Settings(config=config, pools=pools, groups=groups)


def _context() -> dict[str, Any]:
    """What the settings check against but must not look up themselves: the registered provider names."""
    import providers

    return {"providers": providers.available()}


def provider_settings(pool: PoolConfig, index: int) -> tuple[Any, list[str]]:
    """Validate the pool's section named after its provider; return (settings, problems with their paths)."""
    return _section(index, pool.provider, dict(pool.model_extra or {}))


def _section(index: int, provider: str, extra: dict[str, Any]) -> tuple[Any, list[str]]:
    """The provider's section among a pool's keys that are not the pool's own (``extra``), validated."""
    import providers

    where = f"pools[{index}]"
    problems = [f"{where}.{key}: unknown key (is the provider {key!r}?)" for key in extra if key != provider]
    model = providers.factory(provider).settings_model
    try:
        return model.model_validate(extra.get(provider) or {}), problems
    except ValidationError as exc:
        return None, problems + validation.problems(exc, prefix=f"{where}.{provider}")


def _provision_time(pool: Any, settings: Any) -> float:
    """The pool's ``provision_time``; left out, 10 minutes, or on a simulated pool its own boot time
    (``provision_seconds``), so a stand-in cloud whose nodes are ready at once has none in flight."""
    if pool.provision_time is not None:
        return float(pool.provision_time)
    return float(getattr(settings, "provision_seconds", DEFAULT_PROVISION_TIME) if pool.provider == "simulated"
                 else DEFAULT_PROVISION_TIME)


def warnings(settings: Settings) -> list[str]:
    """What is valid but will not work as written: a pool's ``min`` below what its cloud allows, a secret too
    short to be redacted by value."""
    import providers

    from autoscaler.redact import MIN_SECRET

    out = []
    auth = settings.config.server.auth
    secrets = [(f"server.auth.bearer_tokens[{i}].token", t.token) for i, t in enumerate(auth.bearer_tokens)]
    secrets += [(f"server.auth.basic[{i}].password", u.password) for i, u in enumerate(auth.basic)]
    secrets += [("server.auth.grafana_hmac.secret", auth.grafana_hmac.secret)] if auth.grafana_hmac else []
    out += [f"{path}: shorter than {MIN_SECRET} characters: too short to guess-proof, and not redacted by value "
            "from logs" for path, secret in secrets if len(secret.get_secret_value()) < MIN_SECRET]
    ignored = [("defaults", settings.config.defaults.scale_out)]
    ignored += [(f"pools[{i}]", pool.scale_out) for i, pool in enumerate(settings.config.pools)]
    out += [f"{where}.scale_out.delay_after_scale_out: does nothing (a scale-in setting: put it under scale_in)"
            for where, direction in ignored if direction.delay_after_scale_out is not None]
    for index, (pool, spec) in enumerate(zip(settings.config.pools, settings.pools.values())):
        if (settings.config.clustered and spec.victims == "cloud" and not spec.node_selector
                and spec.provider_settings is not None
                and not (pool.scale_in.victims or settings.config.defaults.scale_in.victims)
                and providers.capabilities(spec.provider, spec.provider_settings).removes_named_nodes):
            out.append(f"pools[{index}].node_selector: not set, so the cloud picks which nodes a scale-in removes "
                       f"(provider {spec.provider} has no default); set it for node-aware scale-in (victims: idle)")
        if pool.scale_in.movable_owners is not None and spec.victims != "movable":
            out.append(f"pools[{index}].scale_in.movable_owners: does nothing with victims: {spec.victims} (only "
                       "victims: movable moves pods)")
        limits = providers.capabilities(spec.provider, spec.provider_settings).limits \
            if spec.provider_settings is not None else None
        if limits is not None and spec.min < limits.low:
            out.append(f"pools[{index}].min: {spec.min} is below what the cloud allows ({limits.low}: {limits.why}); "
                       f"scale-in stops at {limits.low} (skipped_limit)")
        out += _headroom_beyond_max(index, spec)
    return out


def _headroom_beyond_max(index: int, spec: PoolSpec) -> list[str]:
    """Spare whole nodes that max can never hold (headroom is clamped at max, so such a setting says more than it
    does)."""
    where = [(f"pools[{index}].scale_out.headroom", spec.scale_out.headroom)]
    where += [(f"pools[{index}].schedules[{i}].headroom", w.headroom) for i, w in enumerate(spec.schedules)]
    return [f"{path}: {room.nodes} spare nodes can never be kept: the pool's max is {spec.max} (headroom is clamped "
            "at max)" for path, room in where if room is not None and room.nodes > spec.max]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _beside_field_errors(data: Any) -> list[str]:
    """What the whole-file validation cannot reach once a field is wrong: the cross-field rules (read from the raw
    file) and the provider sections of the pools that are valid themselves, so one run reports every problem."""
    if not isinstance(data, dict):
        return []
    pools, rules = _list(data.get("pools")), _list(data.get("rules"))
    replay_rules = _list(_dict(data.get("replay")).get("rules"))
    names = [p.get("name") for p in pools if isinstance(p, dict)]
    groups = [g for g in _list(data.get("groups")) if isinstance(g, dict)]
    problems = reference_problems(names, [r.get("pool") for r in rules if isinstance(r, dict)],
                                  [r.get("pool") for r in replay_rules if isinstance(r, dict)],
                                  [g.get("name") for g in groups])
    problems += group_problems(groups, names)
    problems += cluster_problems(data.get("kubernetes"), _list(data.get("clusters")),
                                 [p.get("cluster") for p in pools if isinstance(p, dict)])
    server = _dict(data.get("server"))
    try:
        auth = AuthConfig.model_validate(server.get("auth"))
    except ValidationError:
        auth = None  # its field errors are already reported
    if auth is not None:
        problems += credential_problems(auth, {n for n in names if isinstance(n, str)})
    default_mode = _dict(_dict(data.get("defaults")).get("scale_out")).get("mode")
    for index, raw_pool in enumerate(pools):
        problems += _pool_rules(index, _dict(raw_pool), default_mode)
        try:
            pool = PoolConfig.model_validate(raw_pool, context=_context())
        except ValidationError:  # the pool's own keys are wrong (reported): its provider's section is read anyway
            problems += _raw_section_problems(index, _dict(raw_pool))
            continue
        problems += provider_settings(pool, index)[1]
    return problems


def _raw_section_problems(index: int, raw_pool: dict[str, Any]) -> list[str]:
    """The provider section's problems of a pool whose own keys failed validation (a known provider only)."""
    provider = raw_pool.get("provider")
    if not isinstance(provider, str) or provider not in _context()["providers"]:
        return []
    return _section(index, provider, {k: v for k, v in raw_pool.items() if k not in PoolConfig.model_fields})[1]


_NO_GPUS_PER_NODE = "pools[{index}].gpus_per_node: required with scale_out.mode demand (the GPUs one node adds)"


def _pool_rules(index: int, pool: dict[str, Any], default_mode: Any) -> list[str]:
    """A pool's cross-field rules read from the raw file (the same lines as the full validation's, deduplicated),
    for when a field error elsewhere stops that validation: schedule floors within max, demand mode's GPUs."""
    lows = [_dict(window).get("min") for window in _list(pool.get("schedules"))]
    out = [f"pools[{index}].{problem}" for problem in floors_above_max(pool.get("max"), lows)]
    if needs_gpus_per_node(_dict(pool.get("scale_out")).get("mode") or default_mode, pool.get("gpus_per_node")):
        out.append(_NO_GPUS_PER_NODE.format(index=index))
    return out


def _unique(problems: list[str]) -> list[str]:
    """One line per problem, each once, in the order found."""
    lines = [line for problem in problems for line in problem.split("\n") if line]
    return list(dict.fromkeys(lines))


def parse_selector(text: str) -> tuple[tuple[str, str], ...]:
    """``a=b,c=d`` -> ((a, b), (c, d)); ValueError saying what is wrong."""
    out = []
    for term in text.split(","):
        key, eq, value = term.strip().replace("==", "=").partition("=")
        if not eq or not _LABEL.match(key) or (value and not _LABEL.match(value)):
            raise ValueError(f"{term.strip()!r} is not label=value (a selector such as "
                             "kubernetes.azure.com/agentpool=gpunp, terms joined by commas)")
        out.append((key, value))
    return tuple(out)


def _repair(config: Config, index: int, pool: PoolConfig, settings: Any, problems: list[str],
            replay: bool) -> Any:
    """The pool's ``repair:`` as the core reads it; what makes it unusable goes to ``problems``."""
    import providers

    removes = settings is not None and providers.capabilities(pool.provider, settings).removes_named_nodes
    policy, why = repair_policy(pool.repair, f"pools[{index}].repair", pool.provider, removes or settings is None,
                                config.clustered or replay)
    problems += why
    return policy


def _node_aware(config: Config, index: int, pool: PoolConfig, settings: Any, problems: list[str],
                replay: bool = False) -> dict[str, Any]:
    """``victims``, ``drain_timeout`` and ``node_selector`` of one pool, defaults applied, combinations checked
    (``replay``: the replay's own cluster holds the pool's nodes, so an explicit ``victims`` needs neither a
    ``kubernetes:`` section nor a selector there)."""
    import providers

    where = f"pools[{index}]"
    removes = settings is not None and providers.capabilities(pool.provider, settings).removes_named_nodes
    drain = pool.scale_in.drain_timeout or config.defaults.scale_in.drain_timeout or 600.0
    text = pool.node_selector
    factory = providers.factory(pool.provider)
    if text is None and factory.node_selector is not None and settings is not None:
        text = factory.node_selector(settings)
    victims = pool.scale_in.victims or config.defaults.scale_in.victims
    if victims is None:  # idle only where the pool's nodes can be found; else warnings() says why not
        victims = "idle" if removes and config.clustered and text is not None else "cloud"
    selector: tuple[tuple[str, str], ...] = ()
    if pool.node_selector is not None:
        try:
            selector = parse_selector(pool.node_selector)
        except ValueError as exc:
            problems.append(f"{where}.node_selector: {exc}")
    elif text:
        try:
            selector = parse_selector(text)
        except ValueError as exc:  # the provider's default, built from its own settings: only read with a cluster
            if config.clustered:
                problems.append(f"{where}.node_selector: the default from {where}.{pool.provider} is unusable: {exc}; "
                                "set node_selector")
    if victims != "cloud" and settings is not None:
        # the key the user wrote: the pool's own, or the defaults' it inherits (then the pool is named)
        said, of = ((f"{where}.scale_in.victims", "") if pool.scale_in.victims
                    else ("defaults.scale_in.victims", f" (pool {pool.name})"))
        if not removes:
            problems.append(f"{said}: {victims} needs a provider that removes named nodes; {pool.provider}{of} "
                            "can't name a node (it only changes the count): use victims: cloud")
        elif not config.cluster_settings() and not replay:
            problems.append(f"{said}: {victims} needs the top-level `kubernetes:` section{of} "
                            "(the service must see the pool's nodes and pods to pick them)")
        elif text is None and not replay:
            problems.append(f"{where}.node_selector: required with victims: {victims} (provider {pool.provider} "
                            "has no default), e.g. node_selector: \"nodepool=gpu\"")
    owners = pool.scale_in.movable_owners
    if owners is None:
        owners = config.defaults.scale_in.movable_owners
    forced = pool.scale_in.forced_removal
    if forced is None:
        forced = config.defaults.scale_in.forced_removal
    return {"victims": victims, "drain_timeout": drain, "node_selector": selector,
            "movable_owners": tuple(owners) if owners is not None else DEFAULT_MOVABLE_OWNERS,
            "forced_removal": forced is not False}


def offline(raw: Any) -> Any:
    """The config as the replay reads it: nothing serves HTTP offline, so ``server.auth`` is not read (a file
    without a ``server`` section, like CONTRACT's replay example, or whose secrets are not in the environment,
    replays as it is); every other key is checked as for the service."""
    if not isinstance(raw, dict):
        return raw
    server = raw.get("server")
    rest = {k: v for k, v in server.items() if k != "auth"} if isinstance(server, dict) else {}
    return {**raw, "server": {**rest, "auth": {"disabled": True}}}


def read_yaml(path: str) -> Any:
    """The parsed YAML file; ConfigError when it cannot be read or parsed (the message does not name the file: the
    caller does, once)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml_strict.load(fh)
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ConfigError([f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}"]) from None


def load_config(path: str, env: dict[str, str] | None = None) -> Settings:
    """Read and validate a YAML config file for the service."""
    try:
        raw = read_yaml(path)
    except ConfigError as exc:
        raise ConfigError([f"{path}: {problem}" for problem in exc.problems]) from None
    return build_settings(raw, env)


def load_replay_config(path: str, env: dict[str, str] | None = None) -> tuple[Any, Settings]:
    """A config file as the replay reads it (:func:`offline`, ``replay=True``): the parsed file and its settings.
    Problems do not name the file; the replay's commands print it before each."""
    raw = read_yaml(path)
    return raw, build_settings(offline(raw), env, replay=True)
