PYTHON ?= python3
# The suite and `make run` start many Python processes (gunicorn, Celery, manage.py,
# bench scripts); with bytecode caching off each compiled the project again, about
# 0.5 s of CPU a start. A machine-wide PYTHONDONTWRITEBYTECODE stays out of them.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run manage test test-unit test-postgres test-reliability bench-smoke lint format install bench clean

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)

## The whole system on this machine: DynamoDB Local, Redis, web, worker, beat, demo data.
## Its data stays under var/ between runs; make run RESET=1 deletes it first (starts clean).
## exec: no shell stands between make and bin/run.py, so Ctrl-C ends it cleanly (a shell
## there exited 130 and make printed "make: *** Error 130").
run: $(STAMP)
	RESET="$(RESET)" exec $(BIN)/python bin/run.py

## A management command against what `make run` serves (its DynamoDB Local on
## DDB_LOCAL_PORT, its database under var/): make manage ARGS="issue_api_token --tenant acme"
## (with RUN_REGIONS=2, against both regions of `RUN_REGIONS=2 make run`)
manage: $(STAMP)
	DYNAMODB_ENDPOINT_URL="$${DYNAMODB_ENDPOINT_URL-http://127.0.0.1:$${DDB_LOCAL_PORT:-8001}}" \
	DDB_REGIONS="$${DDB_REGIONS-$$(test "$${RUN_REGIONS:-1}" = 2 && echo us-east-1=http://127.0.0.1:$${DDB_LOCAL_PORT:-8001},eu-west-1=http://127.0.0.1:$${DDB_LOCAL_PORT2:-8002})}" \
	DDB_PRIMARY_REGION="$${DDB_PRIMARY_REGION-$$(test "$${RUN_REGIONS:-1}" = 2 && echo us-east-1)}" \
	DJANGO_DEBUG="$${DJANGO_DEBUG:-1}" DEMO_MODE="$${DEMO_MODE:-1}" $(BIN)/python manage.py $(ARGS)

## The whole test suite: starts its own DynamoDB Local, uses Redis at REDIS_URL.
## TEST_WORKERS pytest-xdist processes (0: none), each with its own DynamoDB Local and
## Redis database, whole files to a worker (docs/testing.md): make test TEST_WORKERS=1
## PYTEST_ARGS go to pytest as they are: make test PYTEST_ARGS=--durations=0
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: $(STAMP)
	$(BIN)/python -m pytest -m "not reliability" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## The pure unit layer alone (tests/unit/: policy, evidence rules, suggestions, case
## transitions, money): no store, database, DynamoDB Local or Redis; seconds, one process.
## make test runs these too.
test-unit: $(STAMP)
	$(BIN)/python -m pytest -n 0 tests/unit

## Every test that touches Django's database (tests/databases.py), on a throw-away
## PostgreSQL cluster the run starts and removes (tests/postgres.py; Debian's package
## postgresql), with the same workers and arguments as make test.
test-postgres: $(STAMP)
	TEST_DATABASE=postgres $(BIN)/python -m pytest -m "not reliability" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

## Long load and fault runs.
test-reliability: $(STAMP)
	$(BIN)/python -m pytest -m reliability

## Every script in bench/ once, at its smallest size (bench/_smoke.py lists each one's
## flags): fails when any exits non-zero or stops at its own assertion; writes nothing
## to docs/. About 5.5 min on 2 idle cores (acks.py 2¼ of them: four drains, each
## waiting for its dispatchers to read the roster); each script starts
## its own DynamoDB Local.
bench-smoke: $(STAMP)
	$(BIN)/python bench/_smoke.py

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
