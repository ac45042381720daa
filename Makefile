PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-reliability lint format install bench clean

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)

## The whole system on this machine: DynamoDB Local, Redis, web, worker, beat, demo data.
run: $(STAMP)
	$(BIN)/python bin/run.py

## The whole test suite: starts its own DynamoDB Local, uses Redis at REDIS_URL.
test: $(STAMP)
	$(BIN)/python -m pytest -m "not reliability"

## Long load and fault runs.
test-reliability: $(STAMP)
	$(BIN)/python -m pytest -m reliability

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var test-results
