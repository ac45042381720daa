"""What the ledger drift check reads and keeps (:mod:`reconciliation.casework.drift`): the
pledge changes a region's ``audit_events.by_day`` index holds in a time range, a
region's ledger totals, and the check's checkpoint item."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from reconciliation import clock
from reconciliation.audit.models import AuditAction
from reconciliation.audit.repository import AuditRepository
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
from reconciliation.stores import PLEDGE_STREAM, pledge_stream_parts, stream_tag

if TYPE_CHECKING:
    from reconciliation.stores import Store

# The checkpoint: one item of the first region's ledger table, under a key no fund can
# have (fund codes are letters, digits and dashes).
CHECKPOINT_KEY = "#DRIFT#CHECKPOINT"
ALL = "*"  # the scope of the overall comparison (ledger of every region against pledges)
_ACTIONS = {AuditAction.PLEDGE_RECORDED: 1, AuditAction.PLEDGE_VOIDED: -1}


def fc(fund: str, currency: str) -> str:
    return f"{fund}#{currency}"


@dataclass(frozen=True)
class Change:
    """One pledge receipt (+amount) or void (-amount) of a stream a region owns, or, with
    ``landed`` set, one found in a region whose stream names another (a replica of that
    region's event, or a *stray*: a second recording made under another region's names)."""

    region: str  # the tag its stream names (and the ledger shard its transaction touched)
    intent_id: str
    stream: str
    at: str
    fund: str
    currency: str
    amount: Decimal  # signed
    seq: int = 1
    event_id: str = ""
    landed: str | None = None  # the tag of the region whose table holds it, if not ``region``

    @property
    def is_stray(self) -> bool:
        return self.landed is not None

    @property
    def key(self) -> str:
        return fc(self.fund, self.currency)

    @property
    def is_receipt(self) -> bool:
        return self.amount >= 0


def _days(after: str, until: str) -> list[date]:
    first, last = clock.parse_iso(after).date(), clock.parse_iso(until).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def pledge_changes(store: Store, after: str, until: str) -> tuple[list[Change], list[Change], int]:
    """The receipts and voids of pledge streams in ``store``'s region with
    ``after < at <= until``, from its ``by_day`` index (eventually consistent: see the
    settle window in casework/drift.py): those of the streams it owns, those of streams
    named for another region (``landed`` set: replicas, or strays that ``strays`` tells
    apart), and how many Queries that took. A void's amount is its stream's receipt."""
    audit = AuditRepository(store)
    names = {"#a": "action", "#s": "stream", "#f": "after"}
    projection = "#s, seq, #a, at_id, event_id, intent_id, #f"
    raw: list[dict] = []
    queries = 0
    for day in _days(after, until):
        for shard in range(AUDIT_DAY_SHARDS):
            queries += 1
            items = audit.period_items(
                f"{day.isoformat()}#{shard}",
                f"{after}#~",  # past every event at ``after`` itself ("~" sorts last)
                f"{until}#~",
                projection=projection,
                names=names,
            )
            raw.extend(from_item(i) for i in items)
    changes: list[Change] = []
    foreign: list[Change] = []
    for event in raw:
        stream, sign = event.get("stream", ""), _ACTIONS.get(event.get("action", ""))
        if not stream.startswith(PLEDGE_STREAM) or sign is None:
            continue
        # Named for another region: usually a replica of that region's event (its owner
        # reports it), but a process that took this region for another's (a region map
        # that differs) records under that region's names, here: ``strays`` decides.
        landed = None if stream_tag(stream) == store.tag else store.tag
        receipt = event.get("after") or {}
        if sign < 0:
            receipt = (audit.event_at(stream, 1) or {}).get("after") or {}
        intent, tag = pledge_stream_parts(stream)
        (changes if landed is None else foreign).append(
            Change(
                region=tag,
                intent_id=intent,
                stream=stream,
                at=event["at_id"].partition("#")[0],
                fund=str(receipt.get("fund", "")),
                currency=str(receipt.get("currency", "")),
                amount=sign * Decimal(str(receipt.get("amount", "0"))),
                seq=int(event.get("seq", 1)),
                event_id=str(event.get("event_id", "")),
                landed=landed,
            )
        )
    return sorted(changes, key=_by_time), sorted(foreign, key=_by_time), queries


def _by_time(change: Change) -> tuple[str, str]:
    return change.at, change.stream


def strays(
    foreign: list[Change], owned: Iterable[Change], by_tag: dict[str, Store]
) -> list[Change]:
    """The events of ``foreign`` that are no replica: a replica carries the event id of
    the event its stream's own region holds (read this run, or else by one consistent
    GetItem there). What is left was recorded in the region it was found in under another
    region's names: the same intent recorded twice when that region recorded it too, even
    under the very same stream and ledger shard names, which replication cannot tell
    apart from a copy."""
    known = {(c.stream, c.seq, c.event_id) for c in owned}
    out = []
    for change in foreign:
        if (change.stream, change.seq, change.event_id) in known:
            continue
        owner = by_tag.get(change.region)
        if owner is not None:
            stored = AuditRepository(owner).event_at(change.stream, change.seq) or {}
            if stored.get("event_id") == change.event_id:
                continue
        out.append(change)
    return out


def ledger_totals(store: Store, keys: Iterable[str]) -> dict[str, Decimal]:
    """This region's ledger total of each ``fund#currency`` (consistent BatchGetItem)."""
    ledger = LedgerRepository(store)
    out = {}
    for key in sorted(set(keys)):
        fund, _, currency = key.partition("#")
        out[key] = ledger.total(fund, currency).pledged_total
    return out


@dataclass
class Checkpoint:
    """Where the check stands: everything at or before ``watermark`` is in ``expected``
    (per region tag: each ``fund#currency``'s ledger as its receipts and voids say) and
    in ``pledges`` (per ``fund#currency``: the sum of RECORDED pledges); ``accepted`` holds
    the differences explained for good (per scope, region tag or ``ALL``), ``open`` the
    open cases and what each reports, ``reported`` the duplicate intents already counted
    whose receipts are still inside the settle window."""

    version: int = 0
    watermark: str = ""
    checked_at: str = ""
    expected: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    pledges: dict[str, Decimal] = field(default_factory=dict)
    accepted: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    open: dict[str, dict] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)
    # Per ``fund#currency``: what stray recordings added to ledger shards under another
    # region's names (shards no region's own total reads).
    strays: dict[str, Decimal] = field(default_factory=dict)

    def body(self) -> str:
        def plain(value):
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return str(value) if isinstance(value, Decimal) else value

        fields = ("watermark", "checked_at", "expected", "pledges", "accepted", "open", "strays")
        return json.dumps(
            {**{n: plain(getattr(self, n)) for n in fields}, "reported": self.reported},
            sort_keys=True,
        )

    @classmethod
    def parse(cls, version: int, body: str) -> Checkpoint:
        data = json.loads(body)

        def money(d: dict) -> dict[str, Decimal]:
            return {k: Decimal(v) for k, v in d.items()}

        return cls(
            version=version,
            watermark=data["watermark"],
            checked_at=data.get("checked_at", ""),
            expected={r: money(d) for r, d in data.get("expected", {}).items()},
            pledges=money(data.get("pledges", {})),
            accepted={s: money(d) for s, d in data.get("accepted", {}).items()},
            open=data.get("open", {}),
            reported=data.get("reported", {}),
            strays=money(data.get("strays", {})),
        )


class CheckpointRepository:
    """The checkpoint item, in the first region (a region-wide record)."""

    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.ledger

    def get(self) -> Checkpoint:
        response = self.client.get_item(
            TableName=self.table, Key={"fund": {"S": CHECKPOINT_KEY}}, ConsistentRead=True
        )
        item = from_item(response.get("Item"))
        if not item:
            return Checkpoint()
        return Checkpoint.parse(int(item["version"]), item["state"])

    def put(self, checkpoint: Checkpoint, *, seen: int) -> None:
        """Write ``checkpoint`` as version ``seen + 1``, only if the stored one is still
        ``seen`` (0: none yet): of two concurrent runs, one advances it. Raises the
        ConditionalCheckFailedException the loser gets."""
        condition = "attribute_not_exists(fund)" if seen == 0 else "version = :seen"
        kwargs: dict = {
            "TableName": self.table,
            "Item": {
                "fund": {"S": CHECKPOINT_KEY},
                "version": {"N": str(seen + 1)},
                "state": {"S": checkpoint.body()},
            },
            "ConditionExpression": condition,
        }
        if seen:
            kwargs["ExpressionAttributeValues"] = {":seen": {"N": str(seen)}}
        self.client.put_item(**kwargs)
