"""Bring older cases up to date with the attributes its indexes and
totals read: ``donor_ref`` and its folded ``donor_key`` (``by_donor_key``: donor search in
any letter case), ``resolved_month``/``resolved_sort``/
``resolved_by``/``resolved_how`` (``resolved_by_time``), and ``in_totals`` with the
queue counters' amount totals for open cases. Run once by ``manage.py backfill_cases``
(a maintenance command: it Scans the cases table, which no request path does).

Each case is updated in one transaction, conditioned on the version read, together with
its counter move: a case changed meanwhile is skipped and counted, never half-done, and
running the command again finishes it. A case already carrying the attributes is left
alone, so a second run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from reconciliation.cases.counters import (
    counter_key,
    counter_shard,
    totals_attribute,
)
from reconciliation.cases.models import CaseRequest, Resolution, decoded_row, resolved_month
from reconciliation.cases.vocabulary import CaseState
from reconciliation.dynamo.cancellation import CancellationCode
from reconciliation.dynamo.errors import cancellation_codes
from reconciliation.dynamo.items import from_item, transact_items, values
from reconciliation.dynamo.tables import donor_search_key

if TYPE_CHECKING:
    from reconciliation.stores import Store


@dataclass
class BackfillReport:
    seen: int = 0
    updated: int = 0
    totalled: int = 0
    skipped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"backfill_cases: {self.seen} cases read, {self.updated} updated, "
            f"{self.totalled} open cases added to the amount totals"
        ]
        if self.skipped:
            out.append(
                f"{len(self.skipped)} changed while being read (run again): "
                + ", ".join(self.skipped[:20])
            )
        return out


def _missing(case: dict[str, Any]) -> dict[str, Any]:
    """The derived attributes ``case`` lacks, with their values."""
    sets: dict[str, Any] = {}
    request: CaseRequest | None = case.get("request")
    if not case.get("donor_ref") and request is not None and request.donor_ref:
        sets["donor_ref"] = request.donor_ref
    donor_ref = sets.get("donor_ref") or case.get("donor_ref")
    if donor_ref and not case.get("donor_key"):
        sets["donor_key"] = donor_search_key(donor_ref)
    if case.get("state") == CaseState.RESOLVED and not case.get("resolved_month"):
        resolution: Resolution | None = case.get("resolution")
        at = (
            (resolution.at if resolution else "")
            or case.get("last_action_at")
            or case.get("opened_at")
        )
        if at:
            sets["resolved_month"] = resolved_month(at)
            sets["resolved_sort"] = f"{at}#{case['case_id']}"
            sets["resolved_by"] = (resolution.by if resolution else "") or case.get(
                "last_actor", ""
            )
            if resolution and resolution.disposition:
                sets["resolved_how"] = resolution.disposition
    if not case.get("in_totals") and case.get("currency"):
        sets["in_totals"] = True
    return sets


def cases_backfill(store: Store) -> BackfillReport:
    report = BackfillReport()
    pages = store.client.get_paginator("scan").paginate(TableName=store.tables.cases)
    for page in pages:
        for raw in page.get("Items", []):
            if from_item(raw)["case_id"].startswith("#"):
                continue  # a counter, or the configuration record (#CONFIG#…): no case
            case = decoded_row(raw)  # its parts read into their records
            report.seen += 1
            sets = _missing(case)
            if sets:
                _case_backfill(store, case, sets, report)
    return report


def _case_backfill(
    store: Store, case: dict[str, Any], sets: dict[str, Any], report: BackfillReport
) -> None:
    """Write ``sets`` on ``case`` in one transaction, with its queue counter's totals when
    the case is open and joins them; a case changed meanwhile is skipped."""
    items = [_case_update(store.tables.cases, case, sets)]
    counted = "in_totals" in sets and bool(case.get("queue"))
    if counted:
        # Open and now in the totals: its amount joins its queue's counter in the
        # same transaction (the count itself was always kept).
        items.append(_counter_update(store, case))
    try:
        store.client.transact_write_items(TransactItems=transact_items(items))
    except ClientError as exc:
        codes = cancellation_codes(exc)
        if codes and codes[0] == CancellationCode.CONDITIONAL_CHECK_FAILED:
            report.skipped.append(case["case_id"])
            return
        raise
    report.updated += 1
    report.totalled += int(counted)


def _case_update(table: str, case: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    names = {f"#a{n}": k for n, k in enumerate(sets)}
    vals = {f"v{n}": v for n, v in enumerate(sets.values())}
    return {
        "Update": {
            "TableName": table,
            "Key": {"case_id": {"S": case["case_id"]}},
            "UpdateExpression": "SET " + ", ".join(f"#a{n} = :v{n}" for n in range(len(sets))),
            # The version read: a case changed meanwhile is left for a rerun;
            # and not yet in the totals, so two runs at once add it once.
            "ConditionExpression": "version = :seen"
            + (
                " AND (attribute_not_exists(in_totals) OR in_totals = :untotalled)"
                if "in_totals" in sets
                else ""
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values(
                **vals,
                seen=case["version"],
                **({"untotalled": False} if "in_totals" in sets else {}),
            ),
        }
    }


def _counter_update(store: Store, case: dict[str, Any]) -> dict[str, Any]:
    counter = counter_key(case["queue"], counter_shard(case["case_id"]), store.tag)
    return {
        "Update": {
            "TableName": store.tables.cases,
            "Key": {"case_id": {"S": counter}},
            "UpdateExpression": "ADD totalled :one, #amount :a",
            "ExpressionAttributeNames": {"#amount": totals_attribute(case["currency"])},
            "ExpressionAttributeValues": values(one=1, a=case["amount"]),
        }
    }
