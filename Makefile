# Two commands a newcomer needs: `make run` and `make test` (`make test-fast`
# while working; tests/README.md says what each lane runs and how long it takes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast screenshots check bench bench-full bench-deps clean deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev,bench]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/ai-memory cluster up --nodes 3 --base-port 9077 --data ./.data

# System tools the tests use, from Debian when missing: systemd-analyze (unit
# verification), chromium (the web inbox's browser tests, driven by
# Playwright; no browser is downloaded) and npx (the MCP Inspector CLI test).
# One apt-get run installs whatever is missing. Without apt-get as root it
# says so and the tests that need the tool are skipped.
deps:
	@missing=""; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v npx >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "make deps: missing Debian packages:$$missing (apt-get unavailable or not root);" \
	         "the tests that need them will be skipped"; \
	  fi; \
	fi

# Test processes (pytest-xdist): two, each running whole files (so a module's
# cluster is started once), as on CI's two cores; most of a cluster test is
# waiting, so two together take about 60 % of the serial time.
# `make test TEST_WORKERS=0` runs the suite in one process.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

# The full suite, what CI runs (.ci/run).
test: $(STAMP) deps
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# The fast lane: every test not marked slow or cluster (no multi-process
# cluster, the first batch of simulator seeds only).
test-fast: $(STAMP) deps
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not cluster" $(PYTEST_ARGS)

# The screenshots in docs/web.md, taken by the browser tests in Debian's
# chromium. Test runs write theirs to a temporary folder; this names docs/img.
screenshots: $(STAMP) deps
	AI_MEMORY_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/python -m pytest -q \
		tests/e2e/test_web_browser.py \
		-k "test_anonymous_inbox_pages_past_50_and_expands_a_row or test_compose_and_send"
	@ls -l docs/img/inbox.png docs/img/composer.png

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy common store federation daemon cli

# NATS JetStream is the side-by-side comparison in every bench run: nats-py
# comes with the bench extra, nats-server from Debian. As root with apt-get
# it is installed here; otherwise the command to run is printed and the run
# goes on (the harness then reports the NATS figure as skipped, and why).
bench-deps:
	@if command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing nats-server from Debian (apt-get install -y nats-server)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server \
			|| echo "apt-get install nats-server failed; the NATS comparison will be skipped"; \
	else \
		echo "nats-server is missing; to compare with NATS JetStream run:"; \
		echo "    sudo apt-get update && sudo apt-get install -y nats-server"; \
	fi

bench: $(STAMP) bench-deps
	$(BIN)/python -m bench --profile quick

bench-full: $(STAMP) bench-deps
	$(BIN)/python -m bench --profile full

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache
