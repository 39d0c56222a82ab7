"""Load the YAML config, substitute ``${VAR}``, validate it into frozen typed objects.

Every problem is reported with its path in the file, e.g. ``pools[1].max: must be >= min (3)``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler import validation
from autoscaler.models import DirectionPolicy, Mode, PoolSpec, Schedule
from autoscaler.config_schema import Config, DirectionConfig

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class ConfigError(Exception):
    """The config is invalid; ``problems`` holds one line per problem, each starting with its path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Settings:
    """The validated config plus each pool's effective spec (defaults merged, provider settings typed)."""

    config: Config
    pools: dict[str, PoolSpec]


def _substitute(node: Any, loc: tuple[Any, ...], env: dict[str, str], problems: list[str]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, loc + (k,), env, problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, loc + (i,), env, problems) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            return env[name]
        if default is not None:
            return default
        if name in env:
            return ""
        problems.append(f"{validation.location(loc)}: environment variable {name} is not set and has no default")
        return ""

    return _VAR.sub(repl, node)


def _direction(base: DirectionConfig, override: DirectionConfig) -> DirectionPolicy:
    merged = {**base.model_dump(exclude_none=True), **override.model_dump(exclude_none=True)}
    if "mode" in merged:
        merged["mode"] = Mode(merged["mode"])
    return DirectionPolicy(**merged)


def build_settings(raw: Any, env: dict[str, str] | None = None) -> Settings:
    """Validate a parsed YAML document; ConfigError lists every problem."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): must be a mapping of config keys"])
    data = _substitute(raw, (), dict(os.environ) if env is None else env, problems)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        # cross-field checks on the whole file already start with their own path
        problems.extend(validation.problems(exc))
        raise ConfigError(problems) from None
    pools: dict[str, PoolSpec] = {}
    for index, pool in enumerate(config.pools):
        settings, pool_problems = pool.provider_settings(index)
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
            provision_time=pool.provision_time,
            schedules=tuple(Schedule(w.cron, w.duration, w.min, w.timezone) for w in pool.schedules),
        )
    if problems:
        raise ConfigError(problems)
    return Settings(config=config, pools=pools)


def load_config(path: str, env: dict[str, str] | None = None) -> Settings:
    """Read and validate a YAML config file."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        raise ConfigError([f"{path}: not valid YAML at {where}: {getattr(exc, 'problem', exc)}"]) from None
    return build_settings(raw, env)
