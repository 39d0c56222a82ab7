"""``${VAR}`` and ``${VAR:-default}`` in the config's values, with references inside defaults (``${A:-${B}}``).

A ``${`` that does not start a whole reference (unclosed, no variable name, a shell form we do not read such as
``${A-b}`` or ``${A:=b}``) is a problem named by its path, never left in the value: a literal ``${...}`` must not become
a token, a password or a URL. A value read from the environment is used as it is, never expanded again; one that
holds ``${`` (a template nothing expanded, e.g. a Kubernetes ``env`` value, which expands ``$(VAR)`` only) is refused
too, without echoing it (it may be a secret).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from autoscaler.config import validation

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_DEPTH = 8  # defaults inside defaults; deeper is a mistake, not a config


class _Refused(Exception):
    """One value's problem (the caller adds its path)."""


def substitute(node: Any, env: Mapping[str, str], problems: list[str], loc: tuple[Any, ...] = ()) -> Any:
    """``node`` (the parsed YAML) with every string's references expanded; each problem appended with its path."""
    if isinstance(node, dict):
        return {k: substitute(v, env, problems, loc + (k,)) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, env, problems, loc + (i,)) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    missing: list[str] = []
    try:
        value = _expand(node, env, missing, 0)
    except _Refused as exc:
        problems.append(f"{validation.location(loc)}: {exc}")
        return ""
    problems.extend(f"{validation.location(loc)}: environment variable {name} is not set and has no default"
                    for name in missing)
    return value


def _expand(text: str, env: Mapping[str, str] | None, missing: list[str], depth: int) -> str:
    """``text`` expanded; ``env`` None only checks the syntax (a default not used still has to be well formed)."""
    if depth > MAX_DEPTH:
        raise _Refused(f"references nested more than {MAX_DEPTH} deep")
    out, at = [], 0
    while (start := text.find("${", at)) >= 0:
        out.append(text[at:start])
        name, default, at = _reference(text, start)
        if default is not None:
            _expand(default, None, missing, depth + 1)  # its syntax, whether or not it is used
        out.append(_value(name, default, env, missing, depth))
    out.append(text[at:])
    return "".join(out)


def _reference(text: str, start: int) -> tuple[str, str | None, int]:
    """The reference at ``text[start:]`` (which starts with ``${``): its name, its default (None without one) and
    where the text goes on after it."""
    name = _NAME.match(text, start + 2)
    if name is None:
        raise _Refused("'${' is not followed by a variable name (write ${NAME} or ${NAME:-default})")
    at = name.end()
    if text.startswith("}", at):
        return name.group(), None, at + 1
    if not text.startswith(":-", at):
        if at >= len(text):
            raise _Refused(f"${{{name.group()} is not closed with '}}'")
        raise _Refused(f"${{{name.group()}{text[at:at + 2]}...: only ${{NAME}} and ${{NAME:-default}} are read")
    level, pos = 0, at + 2
    while pos < len(text):
        if text.startswith("${", pos):
            level, pos = level + 1, pos + 2
            continue
        if text[pos] == "}":
            if level == 0:
                return name.group(), text[at + 2:pos], pos + 1
            level -= 1
        pos += 1
    raise _Refused(f"${{{name.group()}:-... is not closed with '}}'")


def _value(name: str, default: str | None, env: Mapping[str, str] | None, missing: list[str], depth: int) -> str:
    """The variable's value when it is set and not empty, else its default expanded, else "" (and a problem)."""
    if env is None:
        return ""
    value = env.get(name, "")
    if value:
        if "${" in value:
            raise _Refused(f"environment variable {name} holds '${{' (a reference nothing expanded: values from the "
                           "environment are used as they are); set it to the value itself")
        return value
    if default is not None:
        return _expand(default, env, missing, depth + 1)
    if name not in env:
        missing.append(name)
    return ""
