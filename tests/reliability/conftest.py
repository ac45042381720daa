"""Fixtures of the reliability runs: a Redis of their own, a DynamoDB Local on disk (so it
can be stopped and restarted with its data), and a recorder of measured figures, which
are written to ``test-results/reliability/*.json`` and printed at the end of the run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciliation.dynamo.client import reset_clients
from reconciliation.dynamo.local import LocalEngine, LocalEngineError, start_dynamodb_local
from reconciliation.simulation import faults
from tests.conftest import OUTPUT_DIR, Engine, fresh_tables, local_engine_unavailable
from tests.reliability.procs import RedisServer

FIGURES_DIR = OUTPUT_DIR / "reliability"
_measured: dict[str, dict] = {}


@pytest.fixture
def log_dir(request: pytest.FixtureRequest) -> Path:
    """Where this test's processes log: kept after the run (CI uploads test-results)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    path = FIGURES_DIR / "logs" / name
    path.mkdir(parents=True, exist_ok=True)
    for old in path.iterdir():
        old.unlink()
    return path


@pytest.fixture
def record():
    """``record(scenario, figures)``: keep what a scenario measured."""

    def write(scenario: str, figures: dict) -> None:
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        text = json.dumps(figures, indent=2, sort_keys=True, default=str)
        (FIGURES_DIR / f"{scenario}.json").write_text(text + "\n")
        _measured[scenario] = figures
        print(f"\n[{scenario}] {text}")

    return write


def pytest_terminal_summary(terminalreporter) -> None:
    if not _measured:
        return
    terminalreporter.section("reliability figures")
    for scenario, figures in _measured.items():
        # The invariant details (ledger rows, counts) stay in the JSON file.
        brief = {k: v for k, v in figures.items() if k != "invariants"}
        terminalreporter.write_line(f"{scenario}: {json.dumps(brief, sort_keys=True, default=str)}")
    terminalreporter.write_line(f"(also in {FIGURES_DIR}/<scenario>.json)")


@pytest.fixture
def own_redis(log_dir: Path) -> Iterator[RedisServer]:
    """A Redis for this test alone, which it may stop and start again."""
    server = RedisServer(log_dir)
    server.start()
    yield server
    server.stop()


class DiskEngine:
    """DynamoDB Local on an on-disk database, stoppable and restartable on its port."""

    def __init__(self, tmp: Path, log_dir: Path):
        self.db_path = tmp / "dynamodb"
        self.log_path = log_dir / "dynamodb-local.log"
        self.engine: LocalEngine | None = None
        self.port: int | None = None

    def start(self) -> None:
        self.engine = start_dynamodb_local(self.port, db_path=self.db_path, log_path=self.log_path)
        self.port = self.engine.port

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def disk_ddb(settings, tmp_path: Path, log_dir: Path) -> Iterator[tuple[Engine, DiskEngine]]:
    """Fresh tables on a DynamoDB Local of this test's own, with its data on disk."""
    engine = DiskEngine(tmp_path, log_dir)
    try:
        engine.start()
    except LocalEngineError as exc:
        local_engine_unavailable(exc)
    client, names = fresh_tables(settings, engine.endpoint_url, tag="r")
    try:
        yield Engine("dynamodb_local", client, names, engine.endpoint_url), engine
    finally:
        faults.set_plan(None)
        engine.stop()
        reset_clients()
