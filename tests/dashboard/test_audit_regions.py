"""The audit screens over two regions: the search page and the streamed
export list the events of both regions once each; a cursor from elsewhere is a 400."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import User

from reconciliation import clock
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.dynamo.items import from_item
from reconciliation.stores import every_store, stream_tag
from tests.helpers import pass_second_factor, staff_user
from tests.reconciliation.factories import submit

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.dynamodb_local_only,
    pytest.mark.usefixtures("midday"),
]


def auditor(client):
    person = User.objects.filter(username="aud").first() or staff_user(
        "aud", "auditor", password="pw-123456789"
    )
    client.force_login(person)
    pass_second_factor(client, person)
    return client


def stored_events() -> list[dict]:
    events = []
    for store in every_store():
        pages = store.client.get_paginator("scan").paginate(
            TableName=store.tables.audit_events, ConsistentRead=True
        )
        events += [from_item(i) for page in pages for i in page.get("Items", [])]
    return events


def test_audit_page_and_export_list_both_regions_events_once(two_regions, client):
    for n in range(8):
        assert submit(f"audit-view-geo-{n}").kind == OutcomeKind.CREATED
    events = stored_events()
    assert {stream_tag(e["stream"]) for e in events} == {"", "eu-west-1"}
    newest_first = [e["event_id"] for e in sorted(events, key=lambda e: e["at_id"], reverse=True)]
    day = {"since": clock.now().date().isoformat()}
    page = auditor(client).get("/audit/", day)
    assert page.status_code == 200
    assert [r.event_id for r in page.context["page"].rows] == newest_first
    assert page.context["page"].chains_ok
    # The stream as people read it: a pledge, its tenant and key, and its region.
    assert b"<code>audit-view-geo-" in page.content
    assert b'<span class="muted">in eu-west-1</span>' in page.content

    export = client.get("/audit/export.csv", day)
    assert export.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert [r["event_id"] for r in rows] == newest_first[::-1]

    bad = client.get("/audit/", {**day, "cursor": "eyJ2IjoxfQ"})
    assert bad.status_code == 400 and b"not one this search produced" in bad.content
