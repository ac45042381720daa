"""Background scans over an index take a row they cannot read yet as "not yet": an
eventually consistent index can show an item mid-write without its projected attributes.
Such a row is skipped with a warning that names it, the rest of the run goes on, and the
next cycle reads it whole (before: ``audit_checkpoint`` failed with ``KeyError('hash')``
and ``sweep_task`` with ``KeyError('pk')``, the whole run lost)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from reconciliation import clock
from reconciliation.acks.repository import ACKS_DUE_INDEX, AckRepository
from reconciliation.audit.checkpoints import Period, audit_checkpoint, checkpoint_period_s
from reconciliation.audit.periods import audit_range_index
from reconciliation.casework.sweeps import sweep_all
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.stores import every_store, home_store
from tests.helpers import AS_SYSTEM, raw_items
from tests.reconciliation.factories import crashed_claim, submit

pytestmark = [pytest.mark.django_db(databases=[]), pytest.mark.usefixtures("midday")]

WARNING_SOURCE = "reconciliation.dynamo.index_rows"


class RowsAdded:
    """The store's client with ``rows`` added to the first page of every Query of
    ``index`` (paginated or not): what an index shows of items mid-write."""

    def __init__(self, monkeypatch, client, index: str, rows: list[dict]):
        self.index, self.rows = index, rows
        query, get_paginator = client.query, client.get_paginator

        def added(kwargs: dict, page: dict) -> dict:
            if kwargs.get("IndexName") != self.index:
                return page
            return {**page, "Items": self.rows + page.get("Items", [])}

        def query_with(**kwargs):
            return added(kwargs, query(**kwargs))

        class Pages:
            def __init__(self, real):
                self.real = real

            def paginate(self, **kwargs):
                for n, page in enumerate(self.real.paginate(**kwargs)):
                    yield added(kwargs, page) if n == 0 else page

        monkeypatch.setattr(client, "query", query_with)
        monkeypatch.setattr(client, "get_paginator", lambda name: Pages(get_paginator(name)))


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == WARNING_SOURCE and r.levelno == logging.WARNING
    ]


def test_a_checkpoint_waits_for_an_event_whose_index_row_has_no_hash_yet(ddb, caplog):
    """An audit event stored without its hash yet (its index row has keys only): the
    run signs the periods before it, warns with the event's key, raises nothing and
    signs its period on the next run, once the event is whole."""
    assert submit("mid-write").kind == OutcomeKind.CREATED
    [event] = [
        e for e in raw_items(ddb, ddb.tables.audit_events) if e["stream"]["S"].startswith("PLEDGE#")
    ]
    stream, seq = event["stream"]["S"], event["seq"]["N"]
    event_period = Period.containing(clock.parse_iso(event["at"]["S"]), checkpoint_period_s())
    without_hash = {k: v for k, v in event.items() if k != "hash"}
    ddb.client.put_item(TableName=ddb.tables.audit_events, Item=without_hash)

    with clock.travel(2 * 3600), caplog.at_level(logging.WARNING):
        first = audit_checkpoint(store=AS_SYSTEM.store)
        assert event_period.label not in first
        [warning] = warnings_of(caplog)
        assert "without hash" in warning and f"stream={stream}" in warning
        assert f"seq={seq}" in warning and event_period.label in warning

        ddb.client.put_item(TableName=ddb.tables.audit_events, Item=event)
        second = audit_checkpoint(store=AS_SYSTEM.store)
    assert second[0] == event_period.label
    assert not set(first) & set(second)


def test_the_sweep_skips_a_pending_row_without_its_key_and_sweeps_the_rest(
    ddb, caplog, monkeypatch
):
    """A ``pending_by_expiry`` row without ``pk``: warned about and skipped; the crashed
    claim beside it still gets its case."""
    with clock.travel(-200):
        crashed_claim("sweep-mid-write")
    shardless = {"pending_shard": {"S": "P#0"}, "expires_at": {"N": "1"}}
    for source in every_store():
        RowsAdded(monkeypatch, source.client, "pending_by_expiry", [shardless])
    with caplog.at_level(logging.WARNING):
        report = sweep_all(every_store(), home=home_store)
    assert len(report.opened) == 1
    warnings = warnings_of(caplog)
    assert warnings and all("pending_by_expiry" in w and "without pk" in w for w in warnings)
    assert "pending_shard=P#0" in warnings[0]


def test_the_acks_due_index_skips_a_row_without_its_intent(ddb, caplog, monkeypatch):
    """A due row without ``intent_id`` is skipped with a warning; the others are due."""
    store = AS_SYSTEM.store
    RowsAdded(
        monkeypatch,
        store.client,
        ACKS_DUE_INDEX,
        [{"ack_shard": {"S": "A#0"}, "ack_due_at": {"N": "5"}}, {"intent_id": {"S": "I-1"}}],
    )
    with caplog.at_level(logging.WARNING):
        due = AckRepository(store).due("A#0", now=clock.epoch())
    assert due == ["I-1"]
    [warning] = warnings_of(caplog)
    assert ACKS_DUE_INDEX in warning and "ack_shard=A#0" in warning


def test_verification_reads_past_an_audit_index_row_without_its_stream(ddb, caplog, monkeypatch):
    """``verify_audit``'s index of the days skips a ``by_day`` row without ``stream``
    and still finds the streams of the others."""
    assert submit("verify-mid-write").kind == OutcomeKind.CREATED
    store = AS_SYSTEM.store
    today = clock.now().date()
    row = {"day_shard": {"S": f"{today.isoformat()}#0"}, "at_id": {"S": clock.iso(clock.now())}}
    RowsAdded(monkeypatch, store.client, "by_day", [row])
    with caplog.at_level(logging.WARNING):
        index = audit_range_index([today, today - timedelta(days=1)], store=store)
    assert any(s.startswith("PLEDGE#") for s in index.streams)
    assert any("without stream" in w for w in warnings_of(caplog))
