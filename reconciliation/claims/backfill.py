"""Give older pledges their ``donor_key`` (the folded donor ref that
keys ``pledges.by_donor_key``), so the staff search finds them by donor ref in any letter
case. Run by ``manage.py backfill_cases`` (a maintenance command: it Scans the pledges
table, which no request path does).

Each pledge is one UpdateItem conditioned on the ref it was computed from and on having
no key yet: two runs at once set it once, and a second run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from reconciliation.dynamo.items import from_item, values
from reconciliation.dynamo.tables import donor_search_key

if TYPE_CHECKING:
    from reconciliation.stores import Store


@dataclass
class PledgeBackfillReport:
    seen: int = 0
    updated: int = 0

    def lines(self) -> list[str]:
        return [f"backfill_pledges: {self.seen} pledges read, {self.updated} given a donor key"]


def pledges_backfill(store: Store) -> PledgeBackfillReport:
    report = PledgeBackfillReport()
    pages = store.client.get_paginator("scan").paginate(
        TableName=store.tables.pledges,
        ProjectionExpression="intent_id, donor_ref, donor_key",
    )
    for page in pages:
        for raw in page.get("Items", []):
            item = from_item(raw)
            report.seen += 1
            ref = item.get("donor_ref")
            if not ref or item.get("donor_key"):
                continue
            try:
                store.client.update_item(
                    TableName=store.tables.pledges,
                    Key={"intent_id": {"S": item["intent_id"]}},
                    UpdateExpression="SET donor_key = :k",
                    # The ref the key was computed from, and no key yet: a concurrent
                    # run (or the item's absence) leaves it alone.
                    ConditionExpression="donor_ref = :ref AND attribute_not_exists(donor_key)",
                    ExpressionAttributeValues=values(k=donor_search_key(ref), ref=ref),
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    continue
                raise
            report.updated += 1
    return report
