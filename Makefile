# Two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test check bench bench-full clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,dev,bench]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/ai-memory cluster up --nodes 3 --base-port 9077 --data ./.data

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy common store federation daemon cli

bench: $(STAMP)
	$(BIN)/python -m bench --profile quick

bench-full: $(STAMP)
	$(BIN)/python -m bench --profile full

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache
