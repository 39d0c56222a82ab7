#!/usr/bin/env bash
# Install the Debian packages of the real components the tests start, when root and missing.
set -euo pipefail
want=()
command -v prometheus >/dev/null 2>&1 || want+=(prometheus)
command -v alertmanager >/dev/null 2>&1 || command -v prometheus-alertmanager >/dev/null 2>&1 || want+=(prometheus-alertmanager)
command -v victoria-metrics >/dev/null 2>&1 || want+=(victoria-metrics)
command -v chromium >/dev/null 2>&1 || want+=(chromium)  # the status page test (headless)
command -v wrk >/dev/null 2>&1 || want+=(wrk)  # the load generator of bench/ (make bench, tests/e2e/test_bench_smoke.py)
# PostgreSQL: this machine kind runs it on 127.0.0.1:5432; start it again if it was stopped.
if [ "$(id -u)" = "0" ] && command -v pg_ctlcluster >/dev/null 2>&1 && command -v pg_isready >/dev/null 2>&1; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "system-deps: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  fi
fi
if [ ${#want[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "system-deps: not root, cannot install: ${want[*]} (tests needing them will say so)" >&2
  exit 0
fi
echo "system-deps: installing ${want[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
