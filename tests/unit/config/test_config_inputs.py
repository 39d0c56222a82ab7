"""Inputs of check-config that a probe found accepted or fatal: YAML alias bombs, duplicate keys, bearer tokens
with whitespace no header can carry, and a cross-field check that was quadratic in the number of pools."""
from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.__main__ import main
from autoscaler.config.load import ConfigError, load_replay_config, read_yaml
from autoscaler.config import reference_problems

VALID = """\
server: {auth: {bearer_tokens: [abcdefghijkl]}}
pools:
  - {name: gpu, provider: simulated, min: 0, max: 4}
"""


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n" + VALID


def _check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = main(["check-config", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return code, out.err.splitlines()


def test_alias_bomb_is_refused_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _bomb()
    assert len(text.encode()) < 1000
    code, lines = _check(tmp_path, text, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert "alias" in lines[0] and "line" in lines[0], lines


def test_alias_bomb_refused_by_the_replay_reader_too(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_bomb())
    with pytest.raises(ConfigError) as err:
        load_replay_config(str(path))
    assert "alias" in err.value.problems[0]


def test_a_few_aliases_for_shared_defaults_still_load(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("common: &c {min: 0, max: 4}\nx: [*c, *c, *c]\nmerged: {<<: *c, max: 8}\n")
    assert read_yaml(str(path)) == {"common": {"min": 0, "max": 4}, "x": [{"min": 0, "max": 4}] * 3,
                                    "merged": {"min": 0, "max": 8}}  # a merge key may override: no duplicate


@pytest.mark.parametrize("text,key,lines", [
    pytest.param(VALID.replace("max: 4}", "max: 4, max: 400}"), "max", (3, 3), id="flow-mapping"),
    pytest.param(VALID + "pools:\n  - {name: other, provider: simulated, min: 0, max: 1}\n", "pools", (2, 4),
                 id="second-pools-section"),
])
def test_duplicate_keys_are_refused_naming_the_key_and_both_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str, lines: tuple[int, int]) -> None:
    code, err = _check(tmp_path, text, capsys)
    assert code == 1 and len(err) == 1, err
    assert f"duplicate key '{key}'" in err[0], err
    assert f"line {lines[1]}" in err[0] and f"first at line {lines[0]}" in err[0], err


@pytest.mark.parametrize("token", ["abcdefghijkl\n", " abcdefghijkl", "abcdefghijkl\t", "abcd\nefghijkl"])
def test_bearer_token_with_whitespace_is_refused_naming_its_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], token: str) -> None:
    text = VALID.replace("[abcdefghijkl]", f"[zyxwvutsrqpo, {token!r}]".replace("'", '"'))
    code, err = _check(tmp_path, text, capsys)
    assert code == 1, err
    assert any(line.startswith("server.auth.bearer_tokens[1].token: ") and "whitespace" in line for line in err), err
    assert token.strip() not in "\n".join(err)  # the secret itself is never printed


class _CountingName(str):
    """A pool name that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountingName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_cross_field_checks_are_linear_in_the_number_of_pools() -> None:
    n = 2000
    names = [_CountingName(f"pool-{i}") for i in range(n)]
    rules = [_CountingName(f"pool-{i}") for i in range(n)]
    _CountingName.compared = 0
    assert reference_problems(names, rules, []) == []
    assert _CountingName.compared <= 10 * n, _CountingName.compared
