"""Reconciliation cases (``cases``) and their per-queue open counters.

A case's id derives from its source (claim key + version) and its type, so opening it
twice is a no-op while two different problems with one claim version never merge into
one case. While unresolved a case carries ``queue`` and sits in the sparse
``open_by_queue`` index; resolving removes ``queue``. Per-queue counters are items in
the same table, changed in the same transaction as the case, so counts are O(1) reads;
each queue's count is spread over ``COUNTER_SHARDS`` items, so no single item is touched
by every case change (a burst of openings would otherwise conflict on it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from reconciliation.cases.counters import (
    CounterMove,
    QueueCounter,
    counter_key,
    counter_keys,
    counter_queue,
    totals_attribute,
)
from reconciliation.cases.models import (
    WALK_PAGE,
    Case,
    case_from_item,
    case_to_item,
    decoded_row,
    is_case_id,
    resolved_month,
)
from reconciliation.cases.vocabulary import QUEUES, CaseState, Queue, queue_for
from reconciliation.dynamo.batch import batch_get
from reconciliation.dynamo.cancellation import DecodedReason
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.dynamo.items import from_item, to_item, values
from reconciliation.dynamo.tables import CASE_LISTING_ATTRIBUTES, donor_key_query
from reconciliation.stores import case_tag

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store


@dataclass(frozen=True)
class CountersAnd:
    """The queue counters and, read in the same BatchGetItem, items that share the table
    (:meth:`CaseRepository.counters_and`)."""

    counters: dict[str, QueueCounter]
    items: dict[str, dict[str, Any]]  # by id; an id not stored is absent


# Leaves out one tenant's cases (``:without_tenant``, the drill's). A case written before
# tenants were stored has none: it is not the drill's, so it stays.
_WITHOUT_TENANT = "(attribute_not_exists(#tenant) OR #tenant <> :without_tenant)"


def case_indexed(case: Case) -> Case:
    """``case`` with the attributes that key its indexes derived from the record: the
    one place they are made, for every write of a case item.

    While unresolved it sits in ``open_by_queue`` under the queue of its type and state,
    keeping its place in the queue. A resolved case leaves that index and enters
    ``resolved_by_time``, keyed by the month it was resolved in, with who resolved it
    and how (its resolution; a case resolved without one, by whoever acted last, then).
    A case that goes back to RESOLVED without a new resolution (a request to reopen it
    declined or expired) keeps the one it had, so who, how and when stay those of the
    resolution, not of the decline."""
    queue = queue_for(case.case_type, case.state)
    queued = replace(
        case,
        queue=queue,
        queue_sort=(case.queue_sort or f"{case.opened_at}#{case.case_id}") if queue else None,
    )
    if case.state != CaseState.RESOLVED:
        return replace(
            queued, resolved_month=None, resolved_sort=None, resolved_by=None, resolved_how=None
        )
    how = case.resolution
    at = (how.at if how else "") or case.last_action_at
    return replace(
        queued,
        resolved_month=resolved_month(at),
        resolved_sort=f"{at}#{case.case_id}",
        resolved_by=(how.by if how else "") or case.last_actor,
        resolved_how=how.disposition if how else None,
    )


class QueryPage(NamedTuple):
    """One Query page of an index: its rows (plain, decoded), where the next page starts
    (``None`` after the last) and the read units it cost."""

    rows: list[dict[str, Any]]
    last_key: dict[str, Any] | None
    units: float


@dataclass
class _IndexQuery:
    """One index Query's key condition and FilterExpression, built a part at a time, with
    the attribute names and values they use."""

    index: str
    key_condition: str
    vals: dict[str, Any]
    names: dict[str, str] = field(default_factory=dict)
    filters: list[str] = field(default_factory=list)
    projection: str = ""  # the attributes to return (all the index holds when empty)

    def narrow(self, expression: str, names: dict[str, str] | None = None, **vals: Any) -> None:
        """Add ``expression`` on the index's sort key to the key condition (it costs only
        what it returns; DynamoDB refuses a filter on a key attribute)."""
        self.key_condition += f" AND {expression}"
        self.names.update(names or {})
        self.vals.update(vals)

    def sort_range(self, sort_key: str, *, after: str | None, before: str | None) -> None:
        """Bound the index's sort key to ``[after, before)`` (either end may be open).
        The sort keys are ``<instant>#<case id>`` and the bounds instants, so a key of
        the instant ``before`` sorts above it: BETWEEN leaves it out as ``<`` does."""
        if after and before:
            self.narrow(f"{sort_key} BETWEEN :after AND :before", after=after, before=before)
        elif after:
            self.narrow(f"{sort_key} >= :after", after=after)
        elif before:
            self.narrow(f"{sort_key} < :before", before=before)

    def keep(self, expression: str, names: dict[str, str] | None = None, **vals: Any) -> None:
        """Add ``expression`` to the FilterExpression."""
        self.filters.append(expression)
        self.names.update(names or {})
        self.vals.update(vals)

    def keep_equal(self, name: str, value: Any) -> None:
        self.keep(f"#{name} = :{name}", {f"#{name}": name}, **{name: value})

    def keep_owned(self, tag: str) -> None:
        """Only the cases living in the region tagged ``tag`` (:func:`owned_filter`)."""
        expression, owned_values = owned_filter(tag)
        self.keep(expression, **owned_values)

    def keep_without_tenant(self, tenant: str) -> None:
        """Not ``tenant``'s cases (the drill's); nothing left out when ``tenant`` is empty."""
        if tenant:
            self.keep(_WITHOUT_TENANT, {"#tenant": "tenant"}, without_tenant=tenant)

    def project(self, attributes: Sequence[str]) -> None:
        """Return only ``attributes`` of each row: botocore's parsing of a row costs in
        proportion to its attributes, and a list that reads hundreds of rows to order
        and total them needs a few of each."""
        self.names.update({f"#p_{a}": a for a in attributes})
        self.projection = ", ".join(f"#p_{a}" for a in attributes)

    def kwargs(self, table: str) -> dict[str, Any]:
        """The Query's arguments (names only when some part uses them: DynamoDB refuses
        a name no expression uses)."""
        kwargs: dict[str, Any] = {
            "TableName": table,
            "IndexName": self.index,
            "KeyConditionExpression": self.key_condition,
            "ExpressionAttributeValues": values(**self.vals),
        }
        if self.names:
            kwargs["ExpressionAttributeNames"] = self.names
        if self.filters:
            kwargs["FilterExpression"] = " AND ".join(self.filters)
        if self.projection:
            kwargs["ProjectionExpression"] = self.projection
        return kwargs


class CaseRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.cases
        self.tag = store.tag

    @staticmethod
    def _key(case_id: str) -> dict[str, AttributeValueTypeDef]:
        return {"case_id": {"S": case_id}}

    def get(self, case_id: str, *, consistent: bool = True) -> Case | None:
        if not is_case_id(case_id):
            # Never a read: a counter item is no case, an oversized key a ValidationException.
            return None
        response = self.client.get_item(
            TableName=self.table, Key=self._key(case_id), ConsistentRead=consistent
        )
        return case_from_item(response.get("Item"))

    def put_new_item(self, case: Case) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table,
                "Item": case_to_item(case_indexed(case)),
                # The id derives from the source: a second opening is a no-op.
                "ConditionExpression": "attribute_not_exists(case_id)",
            }
        }

    def replace_item(self, case: Case, *, seen_version: int) -> dict[str, Any]:
        """Write the whole new case state, conditioned on the version the actor saw, and
        on whether the case was in the amount totals as read: ``backfill_cases`` adds an
        older case to them without a new version, and a change computed from the read
        before it would move the counters without the amount and then overwrite the
        mark (the totals would drift); it is refused as a changed case instead."""
        totals = (
            "in_totals = :totalled"
            if case.in_totals
            else "(attribute_not_exists(in_totals) OR in_totals = :totalled)"
        )
        vals = {"seen": seen_version, "totalled": bool(case.in_totals)}
        return {
            "Put": {
                "TableName": self.table,
                "Item": case_to_item(case_indexed(case)),
                # version = :seen: two people acting on one case, exactly one wins.
                "ConditionExpression": f"version = :seen AND {totals}",
                "ExpressionAttributeValues": values(**vals),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def audit_head_item(self, case: Case, *, seq: int, head: str) -> dict[str, Any]:
        """Move the case's stored audit head to the event at ``seq`` without a new case
        version: for an event that changes nothing of the case (a note), so nobody's open
        form and no pending override's pinned version goes stale because of it.

        Conditioned on the head read: every case change moves ``audit_seq`` in its own
        transaction, so an append or a change committed since the read fails this (and
        the event's own ``attribute_not_exists(seq)`` keeps the stream from forking)."""
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(case.case_id),
                "UpdateExpression": "SET audit_seq = :seq, audit_head = :head",
                # audit_seq = :read: nothing was appended to the case since it was read.
                "ConditionExpression": "audit_seq = :read",
                "ExpressionAttributeValues": values(seq=seq, head=head, read=case.audit_seq),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def counter_item(self, move: CounterMove, *, shard: int) -> dict[str, Any]:
        """Move a queue's count by ``move.delta`` on one of its shards, and, for a case in
        the totals, its currency's amount total and the count of totalled cases. Shards
        may go below zero on their own (an opening and its resolution may land on
        different shards); only their sum is the count."""
        expression = "ADD open_count :d"
        names: dict[str, str] = {}
        vals: dict[str, Any] = {"d": move.delta}
        if move.amount is not None and move.currency:
            expression += ", totalled :d, #amount :a"
            names["#amount"] = totals_attribute(move.currency)
            vals["a"] = move.amount
        if move.drill:
            # The drill's share, in the same ADD: it moves exactly when the count does.
            expression += ", drill_open_count :d"
            if move.amount is not None and move.currency:
                expression += ", drill_totalled :d, #drill_amount :a"
                names["#drill_amount"] = totals_attribute(move.currency, drill=True)
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._key(counter_key(move.queue, shard, self.tag)),
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values(**vals),
        }
        if names:
            update["ExpressionAttributeNames"] = names
        return {"Update": update}

    def counters(self) -> dict[str, QueueCounter]:
        """Open cases and amount totals per queue in this region: the sum of its shards,
        plus the single unsharded item that tables written before sharding still hold.
        One BatchGetItem of fixed size, whatever the number of cases."""
        return self.counters_and().counters

    def counters_and(self, *ids: str) -> CountersAnd:
        """:meth:`counters`, and in the same BatchGetItem the items ``ids`` that share the
        table (the overview's summary, ``reconciliation.casework.overview``) by id."""
        keys = counter_keys(self.tag) + [self._key(i) for i in ids]
        out: dict[str, QueueCounter] = {q: QueueCounter() for q in QUEUES}
        also: dict[str, dict[str, Any]] = {}
        # A few rounds for unprocessed keys, never a spin: a count is a display.
        for raw in batch_get(self.client, self.table, keys, rounds=5):
            item = from_item(raw)
            if item["case_id"] in ids:
                also[item["case_id"]] = item
                continue
            queue = counter_queue(item["case_id"])
            if queue in out:
                out[queue].add(item)
        return CountersAnd(out, also)

    def kept_put(self, item_id: str, values: dict[str, Any]) -> None:
        """Write an item that shares the table but is no case (``#…``, as the counters):
        a derived summary, replaced whole; last writer wins, every writer is fresh."""
        if not item_id.startswith("#"):
            raise ValueError("a kept item's id starts with '#': it is never a case")
        self.client.put_item(TableName=self.table, Item=to_item({**values, "case_id": item_id}))

    def kept_ask(
        self, item_id: str, *, computed_at: str | None, now: str, asked_before: str
    ) -> bool:
        """Mark the kept item ``item_id`` as asked to be replaced, if it is still the one
        computed at ``computed_at`` as read (``None``: none was kept yet, and the mark
        creates the item) and nobody asked since ``asked_before``: ``True`` for the one
        asker who should queue the work, ``False`` for the others (or when it was
        replaced meanwhile). Replacing the item clears the mark."""
        # The first part closes the race with the worker that keeps a new item between
        # this asker's read and its mark; the second, the race between askers.
        if computed_at is None:
            same = "attribute_not_exists(computed_at)"
            read: dict[str, AttributeValueTypeDef] = {}
        else:
            same = "computed_at = :read"
            read = {":read": {"S": computed_at}}
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(item_id),
                UpdateExpression="SET refresh_asked_at = :now",
                ConditionExpression=(
                    f"{same} AND "
                    "(attribute_not_exists(refresh_asked_at) OR refresh_asked_at < :before)"
                ),
                ExpressionAttributeValues={
                    ":now": {"S": now},
                    ":before": {"S": asked_before},
                    **read,
                },
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == ErrorCode.CONDITION_FAILED:
                return False
            raise
        return True

    def counts(self) -> dict[str, int]:
        """Open cases per queue (see :meth:`counters`)."""
        return {q: c.count for q, c in self.counters().items()}

    def query_queue(  # noqa: PLR0913 - keyword options; the callers are casework's to regroup
        self,
        queue: Queue,
        *,
        limit: int,
        start_key: dict[str, Any] | None = None,
        opened_before: str | None = None,
        filters: dict[str, Any] | None = None,
        index: str = "open_by_queue",
        forward: bool = True,
        owned_only: bool = False,
        without_tenant: str = "",
        attributes: Sequence[str] = (),
    ) -> QueryPage:
        """One Query page of a queue index: ``open_by_queue`` (by age), or
        ``open_by_amount`` / ``open_by_fund``; ``forward`` is the index order (oldest,
        smallest, A first).

        ``opened_before`` bounds the range key (minimum age) on the age index, so
        old-only pages cost only what they return, and filters on the others;
        ``filters`` (fund, min_amount, assignee) become a FilterExpression, except the
        one on the index's own sort key (amount on ``open_by_amount``, fund on
        ``open_by_fund``), which DynamoDB accepts only in the key condition (it refuses
        a filter on a key attribute), where it also costs only what it returns.
        ``owned_only`` leaves out, in DynamoDB, the replicas of other regions' cases
        (:func:`owned_filter`), and ``without_tenant`` that tenant's cases (the drill's).
        ``attributes``: only these of each row (every listing attribute when empty).
        Returns plain rows, the LastEvaluatedKey and the read units.
        """
        query = _IndexQuery(index, "#q = :q", {"q": queue}, {"#q": "queue"})
        if owned_only:
            query.keep_owned(self.tag)
        if opened_before and index == "open_by_queue":
            query.sort_range("queue_sort", after=None, before=opened_before)
        elif opened_before:
            query.keep("#opened < :before", {"#opened": "opened_at"}, before=opened_before)
        for name, value in (filters or {}).items():
            if value in (None, ""):
                continue
            if name == "min_amount" and index == "open_by_amount":
                query.narrow("#amount >= :min_amount", {"#amount": "amount"}, min_amount=value)
            elif name == "fund" and index == "open_by_fund":
                query.narrow("#fund = :fund", {"#fund": "fund"}, fund=value)
            elif name == "min_amount":
                query.keep("#amount >= :min_amount", {"#amount": "amount"}, min_amount=value)
            else:
                query.keep_equal(name, value)
        query.keep_without_tenant(without_tenant)
        if attributes:
            query.project(attributes)
        return self._page(query, limit=limit, forward=forward, start_key=start_key)

    def walk_queue(
        self,
        queue: Queue,
        *,
        limit: int | None = None,
        on_units: Callable[[float], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every open case of ``queue`` living in this region, oldest first, ``WALK_PAGE``
        rows a page, yielding no more than ``limit`` rows; ``on_units`` hears each page's
        read units. The replicas of other regions' cases that Global Tables copy here are
        left out by DynamoDB (when several regions are configured) and never count
        toward ``limit``: a region's own cases are never starved by another's backlog."""
        start, seen = None, 0
        several = len(regions()) > 1
        while limit is None or seen < limit:
            page = WALK_PAGE if limit is None else min(WALK_PAGE, limit - seen)
            rows, start, units = self.query_queue(
                queue, limit=page, start_key=start, owned_only=several
            )
            if on_units:
                on_units(units)
            mine = [row for row in rows if case_tag(row["case_id"]) == self.tag]
            seen += len(mine)
            yield from mine
            if not start:
                return

    def count_range(
        self,
        queue: Queue,
        *,
        before: str | None = None,
        after: str | None = None,
        owned_only: bool = False,
        without_tenant: str = "",
    ) -> int:
        """How many open cases of ``queue`` were opened in ``[after, before)``; with
        ``owned_only``, of the cases living in this region (:func:`owned_filter`);
        ``without_tenant``'s cases (the drill's) left out."""
        query = _IndexQuery("open_by_queue", "#q = :q", {"q": queue}, {"#q": "queue"})
        if owned_only:
            query.keep_owned(self.tag)
        query.keep_without_tenant(without_tenant)
        query.sort_range("queue_sort", after=after, before=before)
        pages = self.client.get_paginator("query").paginate(
            **query.kwargs(self.table), Select="COUNT"
        )
        return sum(page.get("Count", 0) for page in pages)

    def ids_for_intent(self, intent_id: str) -> list[str]:
        response = self.client.query(
            TableName=self.table,
            IndexName="by_intent",
            KeyConditionExpression="intent_id = :i",
            ExpressionAttributeValues=values(i=intent_id),
        )
        return [i["case_id"]["S"] for i in response.get("Items", [])]

    def query_assigned(
        self, assignee: str, *, limit: int, start_key: dict[str, Any] | None = None
    ) -> QueryPage:
        """One Query page of ``assignee``'s open cases, oldest first
        (``open_by_assignee``)."""
        query = _IndexQuery("open_by_assignee", "assignee = :a", {"a": assignee})
        return self._page(query, limit=limit, forward=True, start_key=start_key)

    def ids_for_donor(self, donor_ref: str, *, limit: int = 100) -> list[str]:
        """Cases opened for ``donor_ref`` in any letter case, newest first (the sparse
        ``by_donor_key`` index, keyed on the folded ref)."""
        return donor_key_query(self.client, self.table, donor_ref, key="case_id", limit=limit)

    def query_resolved(  # noqa: PLR0913 - keyword options; the callers are casework's to regroup
        self,
        month: str,
        *,
        limit: int,
        start_key: dict[str, Any] | None = None,
        after: str | None = None,
        before: str | None = None,
        filters: dict[str, Any] | None = None,
        without_tenant: str = "",
    ) -> QueryPage:
        """One Query page of one month's ``resolved_by_time`` partition, newest first;
        ``after``/``before`` bound the range key (ISO instants), ``filters``
        (resolved_by, resolved_how, fund) become a FilterExpression, and so does
        ``without_tenant``: that tenant's cases are left out (the drill's)."""
        query = _IndexQuery("resolved_by_time", "resolved_month = :m", {"m": month})
        query.sort_range("resolved_sort", after=after, before=before)
        for name, value in (filters or {}).items():
            if value not in (None, ""):
                query.keep_equal(name, value)
        query.keep_without_tenant(without_tenant)
        return self._page(query, limit=limit, forward=False, start_key=start_key)

    def _page(
        self,
        query: _IndexQuery,
        *,
        limit: int,
        forward: bool,
        start_key: dict[str, Any] | None,
    ) -> QueryPage:
        """Run one page of ``query``, ``limit`` items at most, in the index's order
        (``forward``) or against it, from ``start_key``."""
        kwargs = query.kwargs(self.table)
        kwargs.update(Limit=limit, ScanIndexForward=forward, ReturnConsumedCapacity="TOTAL")
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        response = self.client.query(**kwargs)
        return QueryPage(
            rows=[decoded_row(i) for i in response.get("Items", [])],
            last_key=response.get("LastEvaluatedKey"),
            units=response.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0),
        )

    def decoded_of(self, case_ids: list[str]) -> dict[str, tuple[DecodedReason, ...]]:
        """The decoded cancellation reasons of ``case_ids`` (one BatchGetItem per 100)."""
        keys = [self._key(c) for c in dict.fromkeys(case_ids) if is_case_id(c)]
        if not keys:
            return {}
        found = batch_get(self.client, self.table, keys, projection="case_id, decoded")
        return {row["case_id"]: row.get("decoded") or () for row in (decoded_row(i) for i in found)}

    def listings_of(self, case_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The listing attributes and donor ref of each of ``case_ids`` found here, as
        decoded rows (one BatchGetItem per 100): what a list shows for its page's rows
        when it read only what it orders by."""
        keys = [self._key(c) for c in dict.fromkeys(case_ids) if is_case_id(c)]
        if not keys:
            return {}
        wanted = ["case_id", "donor_ref", *CASE_LISTING_ATTRIBUTES]
        found = batch_get(
            self.client,
            self.table,
            keys,
            projection=", ".join(f"#p_{a}" for a in wanted),
            names={f"#p_{a}": a for a in wanted},
        )
        return {row["case_id"]: row for row in map(decoded_row, found)}

    def donor_refs_of(self, case_ids: list[str]) -> dict[str, str]:
        """The donor ref of each of ``case_ids`` found here (one BatchGetItem per 100):
        the queue indexes do not project it, and a list shows it for its page's rows."""
        keys = [self._key(c) for c in dict.fromkeys(case_ids) if is_case_id(c)]
        if not keys:
            return {}
        found = batch_get(self.client, self.table, keys, projection="case_id, donor_ref")
        return {row["case_id"]: row.get("donor_ref") or "" for row in map(from_item, found)}

    def get_many(self, case_ids: list[str]) -> list[Case]:
        case_ids = [c for c in case_ids if is_case_id(c)]
        keys = [self._key(c) for c in dict.fromkeys(case_ids)]
        found = [case_from_item(i) for i in batch_get(self.client, self.table, keys)]
        order = {c: n for n, c in enumerate(case_ids)}
        return sorted(found, key=lambda c: order.get(c.case_id, 0))


def owned_filter(tag: str) -> tuple[str, dict[str, Any]]:
    """A FilterExpression keeping only the cases that live in the region tagged ``tag``
    (not replicas of other regions'): the case id names the region, by its length and
    its ``-<region>`` suffix (docs/design.md §3, docs/regions.md). Returns the expression and
    its values (``:own_size``, ``:own_tag``)."""
    expression = "size(case_id) = :own_size"
    vals: dict[str, Any] = {"own_size": 18 + (len(tag) + 1 if tag else 0)}
    if tag:
        expression += " AND contains(case_id, :own_tag)"
        vals["own_tag"] = f"-{tag}"
    return expression, vals
