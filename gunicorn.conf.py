"""gunicorn settings: gthread workers, multiprocess metrics clean-up and sane timeouts."""
import os

timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
# gthread: a worker keeps serving on its other threads while one waits for a pool's decision (BENCHMARKS.md §1).
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
graceful_timeout = 20
keepalive = 5
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
# gunicorn's own lines go through the service's formatters too (control characters escaped, secrets redacted)
from autoscaler.gunicorn_log import GunicornLogger  # noqa: E402
from autoscaler.logjson import gunicorn_logconfig, json_logs  # noqa: E402
# imported now, in the master: child_exit may run while the master stops, when an import can fail half-way
from prometheus_client import multiprocess  # noqa: E402

_json_logs = json_logs()
logconfig_dict = gunicorn_logconfig(os.environ.get("LOG_LEVEL", "INFO").upper(), "json" if _json_logs else "text",
                                    access=_json_logs or bool(accesslog))
logger_class = GunicornLogger  # builds an access line's atoms only when access lines are written
if _json_logs:
    access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(L)ss'


def on_starting(server):  # noqa: ANN001 - gunicorn hook
    """Start with an empty metrics directory so old worker files don't add up."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.remove(os.path.join(path, name))
    from autoscaler.store.boot import check_at_start

    # A SQLite store's file is created here, once (workers never create it); a PostgreSQL store must answer now
    # (the first start fails fast), while a worker forked later boots without it (docs/failures.md).
    check_at_start()
    from autoscaler.store.boot import log_config_once

    log_config_once()  # the effective config, once for every worker to come (autoscaler/config/effective.py)


def child_exit(server, worker):  # noqa: ANN001 - gunicorn hook
    """Mark a dead worker's live gauges gone (prometheus_client multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker):  # noqa: ANN001 - gunicorn hook
    """Start this worker's reconciler loop (one process at a time acts: it holds the store lease), and say the
    worker serves: its app is built (its store opened and migrated, the schema repaired) by now."""
    extensions = getattr(getattr(worker, "wsgi", None), "extensions", {})
    reconciler = extensions.get("autoscaler_reconciler")
    if reconciler is not None:
        reconciler.start()
    worker.log.info("worker %s serving: app built, store opened", worker.pid)


def worker_exit(server, worker):  # noqa: ANN001 - gunicorn hook
    """Give the reconciler's lease up, so another worker or replica takes over at its next tick."""
    extensions = getattr(getattr(worker, "wsgi", None), "extensions", {})
    reconciler = extensions.get("autoscaler_reconciler")
    if reconciler is not None:
        reconciler.stop(timeout=2.0)
