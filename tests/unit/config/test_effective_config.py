"""The effective config in the log: once per start (the gunicorn master's), one readable line per section, and
value redaction that masks a PostgreSQL URL's password without eating the ``postgres`` of ``postgresql://``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from autoscaler.config.load import build_settings
from autoscaler.config.effective import sections
from autoscaler.redact import Redactor, active, install, redact_text
from tests.support.servers import Service
from tests.support import config

PASSWORD = "S3cr3t-pw-9"


@pytest.fixture()
def keep_redactor() -> Iterator[None]:
    before = active()
    yield
    install(before)


def installed(store_url: str, **changes: Any) -> Any:
    settings = build_settings(config(store_url, **changes), env={})
    install(Redactor.from_config(settings.config, [s.provider_settings for s in settings.pools.values()],
                                 words=list(settings.pools)))
    return settings


def test_a_postgres_user_is_not_a_secret_and_its_scheme_stays_whole(keep_redactor: None) -> None:
    settings = installed(f"postgresql://postgres:{PASSWORD}@db:5432/app")
    message = (f'connecting to postgresql://postgres:{PASSWORD}@db:5432/app: password authentication failed for '
               f'user "postgres" (postgresql+psycopg, {PASSWORD})')
    said = redact_text(message)
    assert said == ('connecting to postgresql://db:5432/app: password authentication failed for user "postgres" '
                    '(postgresql+psycopg, **********)'), said
    assert "postgres" not in active().secrets
    assert any('"url": "postgresql://db:5432/app"' in text for key, text in sections(settings)[1] if key == "store")


def test_a_word_password_is_masked_where_it_stands_alone(keep_redactor: None) -> None:
    installed("postgresql://app:postgres@db:5432/app")
    said = redact_text("dsn user=app password=postgres host=db; driver postgresql; a postgres_exporter; postgres")
    assert said == "dsn user=app password=********** host=db; driver postgresql; a postgres_exporter; **********"


def test_a_real_secret_is_masked_even_inside_a_longer_string(keep_redactor: None) -> None:
    installed(f"postgresql://app:{PASSWORD}@db:5432/app")
    assert redact_text(f"xx{PASSWORD}yy and /{PASSWORD}/") == "xx**********yy and /**********/"


def test_a_token_written_as_a_urls_username_is_still_a_secret(keep_redactor: None) -> None:
    token = "ghp0aB1cD2eF3gH4iJ5kL6"
    pool = {"name": "hook", "provider": "webhook", "min": 0, "max": 3,
            "webhook": {"url": f"https://{token}@hooks.example.com/scale", "initial_count": 1}}
    installed("sqlite:///x.db", pools=[pool], rules=[])
    assert token in active().secrets
    assert token not in redact_text(f"POST failed: 401 for token {token}")


@pytest.mark.slow
def test_under_gunicorn_the_config_is_logged_once_one_line_a_section(tmp_path: Path) -> None:
    cfg = config(f"sqlite:///{tmp_path}/s.db")
    with Service(cfg, tmp_path, workers=2) as svc:
        from tests.support.pipeline import wait_for

        wait_for(lambda: svc.read_log().count("worker config:") >= 2, 15, "both workers to start")
        log = svc.read_log().splitlines()
    full = [line for line in log if "effective config" in line]
    assert sum("effective config: sha256 " in line for line in full) == 1  # once, not once per worker
    keys = [line.split("effective config.", 1)[1].split(":", 1)[0] for line in full if "effective config." in line]
    assert len(keys) == len(set(keys)) and {"server", "store", "pools[gpu]", "pools[spare]"} <= set(keys), keys
    assert max(len(line) for line in full) < 1200, max(full, key=len)  # a line a person can read
    workers = [line for line in log if "worker config: the effective config logged at start-up" in line]
    assert len(workers) == 2
