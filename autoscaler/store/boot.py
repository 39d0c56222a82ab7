"""The store at a gunicorn master's start, and what a worker it forks does when the store does not answer.

The master checks the store once, before it forks: the very first start fails fast, with a clear message, when the
database cannot be reached (``make run`` is the operator's step, like ``check-config``). Once that check passed, a
worker the master forks later (after a crash, ``max_requests``, a timeout, SIGKILL) boots even while the database is
down: it answers /healthz, is not ready (/readyz 503, ``store_up`` 0), answers webhooks 503 with Retry-After, and
sets its store up (schema migration, pool rows) by itself at the first transaction once the database answers.
A worker that failed to boot would make gunicorn's master exit, and the whole service with it.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

#: Set by the gunicorn master once its start-up check passed: the workers it forks boot without the store.
SUPERVISED_ENV = "AUTOSCALER_STORE_CHECKED"


def supervised() -> bool:
    """Whether this process was forked by a gunicorn master that checked the store at its start."""
    return bool(os.environ.get(SUPERVISED_ENV))


def check_at_start(config_path: str | None = None) -> None:
    """In the gunicorn master, before it forks: pin a SQLite store's file, and make sure a PostgreSQL store answers
    (SystemExit with the reason when it does not). A config that does not load is left for the workers to report."""
    from autoscaler.config.load import load_config
    from autoscaler.store.connections import StoreOptions, normalize_url, postgres_engine, sqlite_file
    from autoscaler.store.sqlite_file import pin

    try:
        settings = load_config(config_path or os.environ.get("AUTOSCALER_CONFIG", "config.example.yaml"))
        url = normalize_url(settings.config.store.url)
    except Exception:  # noqa: BLE001 - the workers load the same config and say what is wrong with it
        log.debug("store not checked by the master", exc_info=True)
        return
    path = sqlite_file(url) if url.get_backend_name() == "sqlite" else None
    if path is not None:  # create the file once and pin its identity for the workers to come
        try:
            pin(path)
        except OSError:  # the workers report a store they cannot open
            log.debug("store not pinned by the master", exc_info=True)
    if url.get_backend_name() == "postgresql":
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        cfg = settings.config.store
        engine = postgres_engine(url, StoreOptions.of(cfg), pooled=False)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            orig = getattr(exc, "orig", None) or exc
            first = (str(orig).strip().splitlines() or [""])[0]
            from autoscaler.redact import redact_text

            raise SystemExit(f"store.url {url.render_as_string(hide_password=True)} is unreachable at start "
                             f"({type(orig).__name__}: {redact_text(first)[:300]}); start the database (and run "
                             "`check-config`), then start the service again. Once started, the service rides "
                             "out the database going away (workers answer 503 until it is back).") from None
        finally:
            engine.dispose()
    os.environ[SUPERVISED_ENV] = "1"


def log_config_once(config_path: str | None = None) -> None:
    """In the gunicorn master: log the effective config once, redacted, for the workers it forks to refer to (a
    config that does not load is left for the workers to report)."""
    from autoscaler.config.load import load_config
    from autoscaler.config.effective import log_effective
    from autoscaler.redact import Redactor, install

    try:
        settings = load_config(config_path or os.environ.get("AUTOSCALER_CONFIG", "config.example.yaml"))
    except Exception:  # noqa: BLE001 - the workers load the same config and say what is wrong with it
        return
    install(Redactor.from_config(settings.config, [s.provider_settings for s in settings.pools.values()],
                                 words=list(settings.pools)))
    log_effective(settings, worker=False)
