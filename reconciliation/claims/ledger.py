"""Running totals per fund and currency (``ledger``), sharded against hot funds.

A pledge's shard is a hash of its intent, so every retry of one commit touches the same
item (the transaction must be identical under its token) while different pledges to one
fund spread over ``LEDGER_SHARDS`` items. With several regions each shard belongs to one
region and its key names it (``GENERAL#USD@eu-west-1#3``; the first region's keys name
none), so no ledger item is ever written from two regions: Global Tables would keep only
the last of two concurrent additions (docs/design.md §3, docs/regions.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings

from reconciliation.dynamo.batch import batch_get
from reconciliation.dynamo.items import from_item

if TYPE_CHECKING:
    from reconciliation.stores import Store


def fund_key(fund: str, currency: str, region_tag: str = "") -> str:
    """A fund and currency's ledger key in the region tagged ``region_tag``, less its
    shard."""
    base = f"{fund}#{currency}"
    return f"{base}@{region_tag}" if region_tag else base


def ledger_key_for(fund: str, currency: str, intent_id: str, region_tag: str = "") -> str:
    shards = max(1, settings.LEDGER_SHARDS)
    shard = int(hashlib.sha256(intent_id.encode()).hexdigest()[:8], 16) % shards
    return f"{fund_key(fund, currency, region_tag)}#{shard}"


@dataclass(frozen=True)
class FundTotal:
    fund: str
    currency: str
    pledged_total: Decimal
    pledge_count: int


@dataclass(frozen=True)
class LedgerShard:
    """One shard of a fund's ledger: what every pledge hashed to it added up to. ``key``
    is the stored item key (``GENERAL#USD#3``), shown only in ``<code>``."""

    key: str
    fund: str
    currency: str
    pledged_total: Decimal
    pledge_count: int


class LedgerRepository:
    """One region's ledger shards."""

    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.ledger
        self.tag = store.tag

    def add_item(
        self, ledger_key: str, *, fund: str, currency: str, amount: Decimal, count: int
    ) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": {"fund": {"S": ledger_key}},
                "UpdateExpression": (
                    "ADD pledged_total :amount, pledge_count :count "
                    "SET fund_code = :fund, currency = :cur"
                ),
                "ExpressionAttributeValues": {
                    ":amount": {"N": str(amount)},
                    ":count": {"N": str(count)},
                    ":fund": {"S": fund},
                    ":cur": {"S": currency},
                },
            }
        }

    def shard(self, ledger_key: str) -> LedgerShard | None:
        """One ledger shard (a GetItem, consistent), or None when nothing was added to it."""
        response = self.client.get_item(
            TableName=self.table, Key={"fund": {"S": ledger_key}}, ConsistentRead=True
        )
        item = from_item(response.get("Item"))
        if item is None:
            return None
        return LedgerShard(
            key=ledger_key,
            fund=item.get("fund_code", ""),
            currency=item.get("currency", ""),
            pledged_total=Decimal(str(item.get("pledged_total", 0))),
            pledge_count=int(item.get("pledge_count", 0)),
        )

    def total(self, fund: str, currency: str) -> FundTotal:
        """Consistent sum over this region's shards of one fund and currency."""
        base = fund_key(fund, currency, self.tag)
        keys = [{"fund": {"S": f"{base}#{i}"}} for i in range(max(1, settings.LEDGER_SHARDS))]
        total, count = Decimal("0"), 0
        for raw in batch_get(self.client, self.table, keys):
            item = from_item(raw)
            total += Decimal(str(item.get("pledged_total", 0)))
            count += int(item.get("pledge_count", 0))
        return FundTotal(fund, currency, total, count)


def fund_total(stores: list[Store], fund: str, currency: str) -> FundTotal:
    """One fund and currency's total over every region's shards, each read in its own
    region (``every_store()``)."""
    total, count = Decimal("0"), 0
    for store in stores:
        part = LedgerRepository(store).total(fund, currency)
        total += part.pledged_total
        count += part.pledge_count
    return FundTotal(fund, currency, total, count)
