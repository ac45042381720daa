"""One repository per table, sharing an injected client (STYLE.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciliation.audit.repository import AuditRepository
from reconciliation.cases.repository import CaseRepository
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.dynamo.client import (
    TableNames,
    client_for_key,
    dynamodb_client,
    table_names,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@dataclass(frozen=True)
class Repositories:
    client: DynamoDBClient
    tables: TableNames
    claims: ClaimRepository
    pledges: PledgeRepository
    ledger: LedgerRepository
    cases: CaseRepository
    audit: AuditRepository

    @classmethod
    def build(cls, client: DynamoDBClient, tables: TableNames) -> Repositories:
        return cls(
            client=client,
            tables=tables,
            claims=ClaimRepository(client, tables.idempotency_keys),
            pledges=PledgeRepository(client, tables.pledges),
            ledger=LedgerRepository(client, tables.ledger),
            cases=CaseRepository(client, tables.cases),
            audit=AuditRepository(client, tables.audit_events),
        )

    def roles(self) -> dict[str, str]:
        """Table role → physical name, for decoding cancellation reasons."""
        return {
            "idempotency_keys": self.tables.idempotency_keys,
            "pledges": self.tables.pledges,
            "ledger": self.tables.ledger,
            "cases": self.tables.cases,
            "audit_events": self.tables.audit_events,
        }


def repositories(client: DynamoDBClient | None = None) -> Repositories:
    """Repositories on ``client`` (default: the first configured region)."""
    return Repositories.build(client or dynamodb_client(), table_names())


def repositories_for_key(key: str) -> Repositories:
    """Repositories in ``key``'s home region: every read and write of one idempotency key
    goes there (DDB_REGIONS)."""
    return Repositories.build(client_for_key(key), table_names())
