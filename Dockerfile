# gpu-pool-autoscaler: gunicorn serving app:app on port 8080 as a non-root user.
FROM python:3.11-slim
# `make image` passes autoscaler/__init__.py's __version__ (the tag it builds; GET /version answers the same)
ARG VERSION=unknown
LABEL org.opencontainers.image.title="gpu-pool-autoscaler" org.opencontainers.image.version="${VERSION}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    AUTOSCALER_CONFIG=/etc/autoscaler/config.yaml \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus-multiproc \
    WEB_CONCURRENCY=2 \
    GUNICORN_THREADS=4

WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt \
    && groupadd --system --gid 10001 autoscaler \
    && useradd --system --uid 10001 --gid autoscaler --home-dir /app --shell /usr/sbin/nologin autoscaler \
    && mkdir -p /app/data /etc/autoscaler "$PROMETHEUS_MULTIPROC_DIR" \
    && chown autoscaler:autoscaler /app/data "$PROMETHEUS_MULTIPROC_DIR"

COPY app.py gunicorn.conf.py config.example.yaml ./
COPY autoscaler ./autoscaler
COPY providers ./providers
COPY config.example.yaml /etc/autoscaler/config.yaml

USER 10001:10001
EXPOSE 8080
# SQLite lives in /app/data (store.url sqlite:///data/autoscaler.db); use PostgreSQL for several replicas.
VOLUME ["/app/data"]

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

# gunicorn.conf.py empties PROMETHEUS_MULTIPROC_DIR at start; mount a tmpfs/emptyDir there with a read-only rootfs.
CMD ["gunicorn", "-c", "gunicorn.conf.py", "-b", "0.0.0.0:8080", "app:app"]
