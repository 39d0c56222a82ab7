"""``${VAR}`` in the config: nested defaults are expanded, and a ``${`` that is not a whole reference is refused with
its path, so no literal ``${...}`` ever becomes a token, a password or a URL (issue 34, item 4: ``${A:-${B}}`` with
A unset used to give the literal ``${B}``, which then authenticated as a bearer token)."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import ConfigError, build_settings
from tests.support import BASE_CONFIG

ROOT = Path(__file__).resolve().parents[3]
WHERE = "server.auth.bearer_tokens[0]"


def with_token(text: str) -> dict[str, Any]:
    raw = copy.deepcopy(BASE_CONFIG)
    raw["server"] = {"auth": {"bearer_tokens": [text]}}
    return raw


def token(text: str, env: dict[str, str]) -> str:
    settings = build_settings(with_token(text), env)
    return settings.config.server.auth.bearer_tokens[0].token.get_secret_value()


def problems(text: str, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        build_settings(with_token(text), env)
    return info.value.problems


@pytest.mark.parametrize(("text", "env", "value"), [
    pytest.param("${A:-${B}}", {"B": "from-b-123"}, "from-b-123", id="nested-default-read"),
    pytest.param("${A:-${B}}", {"A": "from-a-123", "B": "from-b-123"}, "from-a-123", id="set-variable-wins"),
    pytest.param("${A:-${B:-deep-default}}", {}, "deep-default", id="default-of-a-default"),
    pytest.param("${A:-x-${B}-y}", {"B": "mid"}, "x-mid-y", id="reference-inside-a-default"),
    pytest.param("${A:-${B}${C}}", {"B": "one-", "C": "two"}, "one-two", id="two-references-in-a-default"),
    pytest.param("pre-${A:-${B:-b}}-${C:-c}", {}, "pre-b-c", id="several-in-one-value"),
    pytest.param("${A:-${B}}", {"A": "", "B": "empty-a-uses-default"}, "empty-a-uses-default", id="empty-is-unset"),
    pytest.param("${A}", {"A": "x-plain"}, "x-plain", id="plain-value"),
    pytest.param("${A:-{braces}}", {}, "{braces}", id="a-brace-after-a-default"),
    pytest.param("cost$5{x}", {}, "cost$5{x}", id="dollar-and-braces-apart"),
])
def test_expansion(text: str, env: dict[str, str], value: str) -> None:
    assert token(text, env) == value


@pytest.mark.parametrize(("text", "env", "words"), [
    pytest.param("${A:-${B}}", {}, "environment variable B is not set and has no default", id="nested-missing"),
    pytest.param("${A:-${B}", {"B": "b"}, "not closed", id="unclosed-nested"),
    pytest.param("${A", {"A": "a"}, "not closed", id="unclosed"),
    pytest.param("abc${", {}, "variable name", id="dangling"),
    pytest.param("${1X}", {}, "variable name", id="not-a-name"),
    pytest.param("${}", {}, "variable name", id="empty-name"),
    pytest.param("${A-b}", {}, "${NAME:-default}", id="shell-dash-form"),
    pytest.param("${A:=b}", {}, "${NAME:-default}", id="shell-assign-form"),
    pytest.param("${A:-${1}}", {"A": "a-is-set"}, "variable name", id="bad-default-even-when-unused"),
    pytest.param("${A}", {"A": "${B}"}, "environment variable A holds '${'", id="reference-from-the-environment"),
])
def test_refused_with_the_path(text: str, env: dict[str, str], words: str) -> None:
    found = problems(text, env)
    assert any(p.startswith(f"{WHERE}: ") and words in p for p in found), found


def test_a_refusal_never_echoes_the_environment_value() -> None:
    found = problems("${A}", {"A": "s3cret-${B}-value"})
    assert not any("s3cret" in p for p in found), found


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    text = "${A:-" * 200 + "x" + "}" * 200
    assert any("nested" in p for p in problems(text, {})), problems(text, {})


def test_check_config_fails_on_the_nested_default(tmp_path: Path) -> None:
    raw = with_token("${AUTOSCALER_TEST_A:-${AUTOSCALER_TEST_B}}")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{WHERE}: environment variable AUTOSCALER_TEST_B is not set" in run.stdout + run.stderr
    ok = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", str(path)], cwd=ROOT,
                        env={**env, "AUTOSCALER_TEST_B": "a-real-token-1"}, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
