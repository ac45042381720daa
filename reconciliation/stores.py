"""Where a key's items live: one region's DynamoDB client and table names (DESIGN.md §2).

The edge — a view, a task, a command — resolves a :class:`Store` once: the key's home
region for anything about one idempotency key (``home_store``), the first region for
region-wide work (``first_store``). It passes the store down as ``store=``; each package
builds its repository on it (``ClaimRepository(store)``), so nothing below the edge
picks a region, and this module needs nothing of ours but ``dynamo``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciliation.dynamo.client import (
    TableNames,
    client_for_key,
    dynamodb_client,
    regions,
    table_names,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@dataclass(frozen=True)
class Store:
    """One region's tables on one shared client."""

    client: DynamoDBClient
    tables: TableNames

    def roles(self) -> dict[str, str]:
        """Table role → physical name, for decoding cancellation reasons."""
        return {
            "idempotency_keys": self.tables.idempotency_keys,
            "pledges": self.tables.pledges,
            "ledger": self.tables.ledger,
            "cases": self.tables.cases,
            "audit_events": self.tables.audit_events,
        }


def first_store(client: DynamoDBClient | None = None, *, batch: bool = False) -> Store:
    """The first configured region's tables (on ``client`` if given; ``batch``: on a
    client with a batch command's patience, see ``dynamo.client.patience``)."""
    return Store(client or dynamodb_client(batch=batch), table_names())


def home_store(key: str) -> Store:
    """``key``'s home region: every read and write of one idempotency key goes there
    (``DDB_REGIONS``)."""
    return Store(client_for_key(key), table_names())


def every_store() -> list[Store]:
    """Every configured region's tables, the first region first (region-wide sweeps)."""
    names = table_names()
    return [Store(dynamodb_client(region), names) for region in regions()]
