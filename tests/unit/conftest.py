"""The pure unit layer: domain rules tested as values, with no store, database, client or
Redis. A test here that asks for an engine or a database is refused at collection, so
this layer stays fast (``make test-unit``) and never starts DynamoDB Local."""

from __future__ import annotations

import pytest

# Fixtures that reach a store, a database or a running engine (tests/conftest.py,
# pytest-django).
_NOT_PURE = frozenset(
    {
        "ddb",
        "dynamodb_local",
        "dynamodb_local_second",
        "db",
        "transactional_db",
        "client",
        "admin_client",
        "live_server",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(config.rootpath / "tests" / "unit"):
            reached = _NOT_PURE.intersection(getattr(item, "fixturenames", ()))
            if reached:
                raise pytest.UsageError(
                    f"{item.nodeid} is a unit test but asks for {sorted(reached)}: "
                    "move it out of tests/unit/"
                )
