# Two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test check bench bench-full bench-deps clean deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev,bench]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/ai-memory cluster up --nodes 3 --base-port 9077 --data ./.data

# System tools the tests use, from Debian when missing: systemd-analyze (unit
# verification) and chromium (the web inbox's browser tests, driven by
# Playwright; no browser is downloaded). Without apt-get as root it says so
# and the tests that need the tool are skipped.
deps:
	@command -v systemd-analyze >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd; \
	  else \
	    echo "make deps: systemd-analyze missing and apt-get unavailable (or not root);" \
	         "the unit verification test will be skipped"; \
	  fi; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "make deps: chromium missing and apt-get unavailable (or not root);" \
	         "the web inbox browser tests will be skipped"; \
	  fi; }

test: $(STAMP) deps
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

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
