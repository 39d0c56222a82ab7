"""RBAC as docs/rbac.md writes it, as a ClusterRole grants it, and as the fake API server saw it asked for."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "rbac.md"
#: (API group, resource, verb); the core group is ""
Grant = tuple[str, str, str]

_CORE = re.compile(r"^/api/v1(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/[^/]+(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)"
                    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class Row(NamedTuple):
    """One row of docs/rbac.md's table."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    when: frozenset[str]


def _cell(text: str) -> list[str]:
    return [w.strip().strip("`") for w in text.split(",") if w.strip()]


def table() -> list[Row]:
    """The one table of docs/rbac.md."""
    rows: list[Row] = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[1].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        rows.append(Row(group, cells[1].strip("`"), tuple(_cell(cells[2])), frozenset(_cell(cells[3]))))
    return rows


def expected(conditions: set[str]) -> set[Grant]:
    """What the table grants when ``conditions`` hold (a row needs one of its conditions)."""
    return {(r.group, r.resource, v) for r in table() if r.when & conditions for v in r.verbs}


def granted(role: dict[str, Any]) -> set[Grant]:
    """Every (group, resource, verb) a ClusterRole's rules grant."""
    return {(g, res, v) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
            for v in rule["verbs"]}


def asked(log: Iterable[tuple[str, str]]) -> set[Grant]:
    """What each (method, path) a fake API server received needs: GET of a collection is ``list``, of an object
    ``get``; a subresource is ``resource/sub``."""
    out: set[Grant] = set()
    for method, path in log:
        m = _CORE.match(path) or _GROUP.match(path)
        assert m, f"not a Kubernetes API path: {method} {path}"
        group = m.groupdict().get("group") or ""
        resource = m.group("resource") + (f"/{m.group('sub')}" if m.group("sub") else "")
        verb = ("get" if m.group("name") else "list") if method == "GET" else _VERBS[method]
        out.add((group, resource, verb))
    return out
