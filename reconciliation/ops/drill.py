"""The reconciliation drill: proves, against the configured engine, that the write path is
exactly-once and that every unclean outcome is reconciled (``manage.py drill``).

With fresh synthetic intents (tenant ``drill``, a fund of its own) it runs:

1. a first commit;
2. an identical retry with the same token inside the window — no second write;
3. a retry under the same token with a changed amount — rejected as a mismatch;
4. a delayed duplicate after the window, simulated by a new token for the same intent —
   rejected by the durable pledge key;
5. an ambiguous timeout after commit, resolved by reading the durable record;
6. a crash between claim and commit, found by the sweep, then recovered by RETRY_COMMIT;
7. when ``DDB_REGIONS`` names several engines, the two-region scenario of
   :mod:`reconciliation.ops.drill_regions` (keys commit in their home region, a case in
   the second region is listed over every region, the ledger sums every region's
   shards); with one region its row says not applicable.

Then it checks the invariant: the drill fund's ledger equals exactly the intended
commitments, every drill case is where it should be, every audit chain verifies.
Engines that do not honour ``ClientRequestToken`` (moto) get scenarios 2 and 3 reported
as unprovable, never passed. Faults are injected into the drill's own calls only.

This module runs the drill and records it; the scenarios are in
:mod:`reconciliation.ops.drill_scenarios`, the report in
:mod:`reconciliation.ops.drill_report`.
"""

from __future__ import annotations

import itertools
from typing import Any

from reconciliation.actors import system_actor
from reconciliation.audit.append import audit_event_append
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.dynamo.items import from_item
from reconciliation.ops.drill_regions import regions_scenario
from reconciliation.ops.drill_report import DrillReport
from reconciliation.ops.drill_scenarios import Drill
from reconciliation.stores import first_store


def drill_run() -> DrillReport:
    drill = Drill()
    drill.report.engine_honours_token = drill.probe_token()
    key = drill.first_commit()
    drill.identical_retry(key)
    drill.changed_amount(key)
    drill.delayed_duplicate(key)
    drill.ambiguous()
    drill.crash()
    regions_scenario(drill)
    drill.invariants()
    _record(drill.report)
    return drill.report


def _record(report: DrillReport) -> None:
    """The drill's table as a SYSTEM audit event, for the Drill page and the trail."""
    audit_event_append(
        first_store(),
        stream="SYSTEM",
        event=AuditEvent(
            action=AuditAction.DRILL_RUN, actor=system_actor(), detail=report.as_dict()
        ),
    )


def drill_last() -> dict[str, Any] | None:
    """The most recent drill's table, from the SYSTEM stream (newest first, bounded)."""
    store = first_store()
    kwargs: dict[str, Any] = {
        "TableName": store.tables.audit_events,
        "KeyConditionExpression": "#s = :s",
        "FilterExpression": "#a = :a",
        "ExpressionAttributeNames": {"#s": "stream", "#a": "action"},
        "ExpressionAttributeValues": {":s": {"S": "SYSTEM"}, ":a": {"S": "drill_run"}},
        "ScanIndexForward": False,
        "Limit": 50,
    }
    pages = store.client.get_paginator("query").paginate(**kwargs)
    for page in itertools.islice(pages, 20):  # the newest 1,000 SYSTEM events at most
        for item in page.get("Items", []):
            event = from_item(item)
            return {**event.get("detail", {}), "at": event["at"]}
    return None
