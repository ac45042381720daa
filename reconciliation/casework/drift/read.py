"""What one run of the drift check reads: the window since its checkpoint, each region's
pledge receipts and voids in it (its ``by_day`` index), the strays among those named for
another region, the ledger totals of the funds involved, and the changed intents'
pledge items."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings

from reconciliation import clock
from reconciliation.audit.models import AuditAction
from reconciliation.audit.repository import AuditRepository
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, Pledge, claim_pk
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
from reconciliation.stores import PLEDGE_STREAM, Store, pledge_stream_parts, stream_tag

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


@dataclass(frozen=True)
class PledgeChanges:
    """What one region's ``by_day`` index holds for a window (:func:`pledge_changes`)."""

    owned: list[Change]  # of the streams the region owns, oldest first
    named_elsewhere: list[Change]  # of streams named for another region (``landed`` set)
    queries: int  # how many Queries reading them took


@dataclass(frozen=True)
class Window:
    """What a run reads, ``after < at <= until``, and the next checkpoint's watermark: it
    stays ``LEDGER_DRIFT_SETTLE_S`` behind now (the settle window), so what is newer is
    compared now and read again next run."""

    after: str
    until: str
    watermark: str

    @classmethod
    def since(cls, watermark: str, now: datetime) -> Window:
        """The window from the checkpoint's ``watermark`` (on the first run, the settle
        window's start) to ``now``."""
        settle_to = clock.iso(now - timedelta(seconds=int(settings.LEDGER_DRIFT_SETTLE_S)))
        after = watermark or settle_to
        return cls(after=after, until=clock.iso(now), watermark=max(after, settle_to))


@dataclass(frozen=True)
class Reading:
    """Every region's pledge changes in a window, and the ledger totals of their funds."""

    window: Window
    changes: dict[str, list[Change]]  # per region tag, of the streams it owns
    every: list[Change]  # ``changes`` of every region, the first region's first
    strays: list[Change]
    keys: set[str]  # the ``fund#currency`` compared: changed, or known to the checkpoint
    ledgers: dict[str, dict[str, Decimal]]  # per region tag, each key's ledger total
    queries: int

    @property
    def all(self) -> list[Change]:
        """Every change, strays last (an owner's record counts first)."""
        return self.every + self.strays


def _days(after: str, until: str) -> list[date]:
    first, last = clock.parse_iso(after).date(), clock.parse_iso(until).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _day_events(audit: AuditRepository, after: str, until: str) -> tuple[list[dict[str, Any]], int]:
    """The window's events of every day shard (projected), and how many Queries it took."""
    names = {"#a": "action", "#s": "stream", "#f": "after"}
    projection = "#s, seq, #a, at_id, event_id, intent_id, #f"
    raw: list[dict[str, Any]] = []
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
    return raw, queries


def pledge_changes(store: Store, after: str, until: str) -> PledgeChanges:
    """The receipts and voids of pledge streams in ``store``'s region with
    ``after < at <= until``, from its ``by_day`` index (eventually consistent: see the
    settle window in casework/drift/__init__.py): those of the streams it owns, those of
    streams named for another region (``landed`` set: replicas, or strays that ``strays``
    tells apart), and how many Queries that took. A void's amount is its stream's receipt."""
    audit = AuditRepository(store)
    raw, queries = _day_events(audit, after, until)
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
    return PledgeChanges(sorted(changes, key=_by_time), sorted(foreign, key=_by_time), queries)


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


def window_read(stores: Sequence[Store], window: Window, known: Iterable[str]) -> Reading:
    """Read ``window`` in every region (the first region first), then the ledger totals of
    the funds it changed and of the ``known`` ones (the checkpoint's)."""
    by_tag = {s.tag: s for s in stores}
    changes: dict[str, list[Change]] = {}
    foreign: list[Change] = []
    queries = 0
    for store in stores:
        read = pledge_changes(store, window.after, window.until)
        changes[store.tag] = read.owned
        foreign.extend(read.named_elsewhere)
        queries += read.queries
    every = [c for found in changes.values() for c in found]
    stray = strays(foreign, every, by_tag)
    keys = {c.key for c in every + stray} | set(known)
    return Reading(
        window=window,
        changes=changes,
        every=every,
        strays=stray,
        keys=keys,
        ledgers={s.tag: ledger_totals(s, keys) for s in stores},
        queries=queries,
    )


def changed_pledges(
    changes: list[Change], home: Callable[[str], Store], by_tag: dict[str, Store]
) -> dict[str, Pledge | None]:
    """Each changed intent's pledge item: in its home region, else where its stream is."""
    found: dict[str, Pledge | None] = {}
    for change in changes:
        if change.intent_id in found:
            continue
        tenant, _, key = change.intent_id.partition("#")
        pledge = PledgeRepository(home(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key))).get(
            change.intent_id, consistent=True
        )
        if pledge is None and change.region in by_tag:
            pledge = PledgeRepository(by_tag[change.region]).get(change.intent_id)
        found[change.intent_id] = pledge
    return found
