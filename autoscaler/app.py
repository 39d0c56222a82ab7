"""The Flask application factory."""
from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Callable

from flask import Flask

from autoscaler.api.body import UnauthenticatedReads, close_after
from autoscaler.auth.credentials import Authenticator
from autoscaler.clock import SYSTEM, Clock
from autoscaler.config.load import Settings, build_settings, load_config, warnings
from autoscaler.engine.core import Engine
from autoscaler.engine.parts import Parts
from autoscaler.pool.events import EventLog, EventSink
from autoscaler.metrics import Metrics, PoolStateCollector
from autoscaler.logjson import JsonFormatter, TextFormatter, json_logs, quiet_sdks
from autoscaler.reconcile.loop import Reconciler
from autoscaler.config.effective import log_effective
from autoscaler.redact import Redactor, active, install
from autoscaler.service import Service
from autoscaler.reconcile.retention import Pruner
from autoscaler.store import Store, StoreOptions, open_store
from autoscaler.cluster.kube import build_cluster
from autoscaler.cluster.nodes import Cluster
from autoscaler.config import DEFAULT_CLUSTER
from providers import NodePoolProvider, ProviderError, build

log = logging.getLogger("autoscaler")

DEFAULT_CONFIG = "config.example.yaml"
_REDACTED_TYPES = frozenset({"application/json", "text/html", "text/plain"})


def setup_logging() -> None:
    """Plain key=value lines (or JSON with LOG_FORMAT=json) on stderr, once per process; the SDKs' request
    logging off unless LOG_LEVEL=DEBUG."""
    level = os.environ.get("LOG_LEVEL", "INFO").upper()
    quiet_sdks(level)  # under gunicorn too, whose logconfig made the root's handlers already
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_logs() else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler])


def _announce(settings: Settings) -> None:
    log_effective(settings, worker=True)
    for spec in settings.pools.values():
        if spec.dry_run:
            log.warning("=" * 72)
            log.warning("DRY-RUN: pool %s will decide but NEVER change the cloud (dry_run: true)", spec.name)
            log.warning("=" * 72)
    for warning in warnings(settings):
        log.warning("config: %s", warning)
    if settings.config.server.auth.disabled:
        log.warning("AUTH DISABLED: anyone who can reach this service can scale your pools")


def _providers(settings: Settings, given: dict[str, NodePoolProvider] | None,
               clock: Clock) -> dict[str, NodePoolProvider]:
    providers = dict(given or {})
    for spec in settings.pools.values():
        if spec.name not in providers:
            providers[spec.name] = build(spec.provider, spec.name, spec.provider_settings, clock)
    return providers


def _check(providers: dict[str, NodePoolProvider]) -> None:
    for name, provider in providers.items():
        try:
            provider.check()
        except ProviderError as exc:
            log.error("pool %s cannot be managed: %s", name, exc.message)


def create_app(config: Settings | dict[str, Any] | str | os.PathLike[str] | None = None, *,
               clock: Clock | None = None, providers: dict[str, NodePoolProvider] | None = None,
               store: Store | None = None, sinks: list[EventSink] | None = None,
               startup_check: bool = True, cluster: Cluster | None = None,
               clusters: dict[str, Cluster] | None = None) -> Flask:
    """Build the app from settings, a parsed config mapping, a config path, or ``AUTOSCALER_CONFIG``. ``clock``:
    the one source of time (``autoscaler.clock``) for the engine, the reconciler and every provider built here.
    ``cluster`` (the one, "default") or ``clusters`` (by name) stand in for the configured ones (tests)."""
    setup_logging()
    if config is None:
        config = os.environ.get("AUTOSCALER_CONFIG", DEFAULT_CONFIG)
    if isinstance(config, dict):
        settings = build_settings(config)
    elif isinstance(config, (str, os.PathLike)):
        settings = load_config(os.fspath(config))
    else:
        settings = config
    install(Redactor.from_config(settings.config, [s.provider_settings for s in settings.pools.values()],
                                 words=list(settings.pools)))
    time_source = clock or SYSTEM
    wall = time_source.wall
    store = store or open_store(settings.config.store.url, _store_options(settings))
    store.ensure_pools(list(settings.pools))
    built = _providers(settings, providers, time_source)
    if startup_check:
        _check({k: v for k, v in built.items() if providers is None or k not in providers})
    metrics = Metrics(pools=settings.pools)
    sinks = list(sinks or []) + _configured_sinks(settings, metrics)
    events = EventLog(store, sinks, metrics, time_source)
    given = dict(clusters or {}) | ({DEFAULT_CLUSTER: cluster} if cluster is not None else {})
    known = {name: given.get(name) or build_cluster(kube)  # one client per cluster (nothing is contacted yet)
             for name, kube in settings.config.cluster_settings().items()} | given
    parts = Parts.build(settings, store, built, events, time_source, metrics, clusters=known)  # each part once
    engine = Engine(parts)
    service = Service(settings=settings, store=store, providers=built, engine=engine, parts=parts, events=events,
                      auth=Authenticator(settings.config.server.auth, wall, _hmac_nonce_cache(store, wall)),
                      metrics=metrics, wall=wall,
                      sinks=sinks)
    metrics.add_collector(PoolStateCollector(service.pool_rows, wall, store.ping))

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.config.server.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["autoscaler"] = service
    app.extensions["autoscaler_unauthenticated_reads"] = UnauthenticatedReads(
        settings.config.server.max_unauthenticated_reads)
    # Started by gunicorn's post_worker_init (gunicorn.conf.py), not here: an app built by a test runs no thread;
    # tests call tick(now) themselves.
    app.extensions["autoscaler_reconciler"] = Reconciler(parts, engine,
                                                         pruner=Pruner(store, settings.config.store.retain_events,
                                                                       monotonic=time_source.monotonic))
    from autoscaler.api import health, openapi, pools, register_errors, repairs, status, webhooks  # noqa: F401
    from autoscaler.api.headers import browser_headers

    register_errors(app)
    app.after_request(close_after)
    app.after_request(browser_headers)

    @app.after_request
    def _no_secret_out(resp: Any) -> Any:
        """The last line of defence: no answer (JSON, the status page, an error) carries a configured secret."""
        redactor = active()
        if redactor and resp.mimetype in _REDACTED_TYPES and not resp.is_streamed:
            text = resp.get_data(as_text=True)
            clean = redactor.redact(text)
            if clean != text:
                resp.set_data(clean)
        return resp

    app.register_blueprint(health.bp)
    app.register_blueprint(webhooks.bp)
    app.register_blueprint(pools.bp)
    app.register_blueprint(openapi.bp)
    app.register_blueprint(status.bp)
    _announce(settings)
    return app


def _hmac_nonce_cache(store: Store, clock: Callable[[], float]) -> Callable[[str, float], bool]:
    """HMAC signatures seen, kept in the store's dedup table so the check holds across workers and replicas."""

    def first_use(key: str, window: float) -> bool:
        return store.claim_dedup("_hmac", (key,), clock(), window, uuid.uuid4().hex)

    return first_use


def _store_options(settings: Settings) -> StoreOptions:
    return StoreOptions.of(settings.config.store, settings.config.server.lock_wait)


def _configured_sinks(settings: Settings, metrics: Metrics) -> list[Any]:
    influx = settings.config.influxdb
    if influx is None:
        return []
    try:
        from autoscaler.sinks.influx import InfluxSink
    except ImportError:
        log.error("influxdb is configured but the InfluxDB sink is not available")
        return []
    return [InfluxSink(influx, dropped=metrics.sink_dropped)]
