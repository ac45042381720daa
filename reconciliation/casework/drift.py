"""Ledger drift detection (docs/design.md §6 ``LEDGER_DRIFT``): a periodic
check that each fund's ledger equals its RECORDED pledges, per region and overall, at a
cost proportional to what changed since its last run.

Rules:

- Every pledge is one transaction: its pledge item, an ADD to one ledger shard of the
  region that wrote it, and its receipt (``PLEDGE_RECORDED``, seq 1 of the region's
  pledge stream); a void adds ``PLEDGE_VOIDED`` to that stream and subtracts from the
  same shard. So what changed since the last run is the receipts and voids in each
  region's ``audit_events.by_day`` index after the checkpoint's watermark (only the
  streams that region owns; replicas are dropped): one Query per day shard.
- Per region and ``fund#currency``: the ledger (its shards, read consistently) must equal
  the expected total, the checkpoint's plus the receipts less the voids since. A
  difference there is the ledger changing without a pledge (or a pledge without its
  ledger), and the case says so; it names no intent, since none explains it.
- Overall: the expected ledgers of every region must equal the sum of RECORDED pledges,
  kept by reading, for each intent that changed, its pledge item in its home region (in
  the region its stream names when the home has none). A receipt counts on the pledge
  side only in the region the pledge item's ``ledger_key`` names: after Global Tables'
  last writer wins, that is the one write the pledges table kept. A receipt of another
  region is the same intent recorded twice: ``dynamo_cross_region_duplicate_detected_total``
  counts it once per intent, and the overall case names it. A changed intent with no
  pledge item at all is named too.
- Whatever the cause, and under whatever names: a receipt found in a region whose stream
  names another region is a replica when that region holds the same event (same event
  id), and otherwise a *stray*, recorded here by a process that took this region for
  the other (a region map that differs between processes: docs/regions.md, "One
  configuration"). Two records of one intent under the *same* names (the untagged stream
  and ledger shard in two regions) look alike to every owner's read, so only this tells
  them apart. A stray counts on the ledger side (``strays``: its shard is one no
  region's own total reads) and on the pledge side only when it is the intent's one
  record; otherwise it is a duplicate, counted and named like any other.
- Settle window: receipts are stamped when the key was claimed (a retry under the same
  token is byte-identical), so one may land up to the 10-minute token window after its
  ``at``; the index is eventually consistent; replication takes its time. The watermark
  therefore stays ``LEDGER_DRIFT_SETTLE_S`` (default 15 min) behind now: each run reads
  from the watermark to now and compares with all of it, but keeps in the checkpoint only
  what is older than the new watermark (the rest is read again next run).
- Confirmation: a difference is read again after ``LEDGER_DRIFT_CONFIRM_MS`` (the whole
  window and the ledger). If anything of that fund moved meanwhile, it is left to the
  next run; a case opens only for a difference that held still. The duplicate counter
  moves only in the run whose checkpoint write wins.
- Reported once: while a scope's case is open, a difference equal to what its open cases
  report (or back to none: finance corrected it first) opens nothing; only what differs
  beyond them opens a new case, for that part. A case resolved as DRIFT_EXPLAINED makes
  its difference part of the scope's ``accepted`` offset for good; DRIFT_CORRECTED does
  not (finance made its own adjustment, so the ledger is expected to match again).
  Nothing here writes money.
- Checkpoint: one item in the first region's ledger table (``#DRIFT#CHECKPOINT``), written
  only if its version is still the one this run read, so of two concurrent runs one
  advances it; case ids derive from scope, fund, currency and that version, so the other
  run's openings are no-ops. Cases live in the first region (a region-wide finding).
- First sight: a ``fund#currency`` the checkpoint does not know yet (every one on the
  first run, which starts ``LEDGER_DRIFT_SETTLE_S`` back) is taken as right as read
  then: its baseline is the ledger less the changes read, kept only if the confirming
  read finds it did not move meanwhile (else it is taken on a later run). A drift older
  than its first sight is therefore not reported; a full read of the pledges table
  would, at the cost of every pledge, and is left to the drill.

Blind spots: a commit landing more than ``LEDGER_DRIFT_SETTLE_S`` after its receipt's
``at`` (a worker stalled that long and still fenced in) shows as a drift that no intent
explains; a fund written to on every run between the two reads is compared only on a
run where it is quiet; a duplicate whose winning region changes after it settled (only
with replication slower than the settle window) may be counted again.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError
from django.conf import settings

from reconciliation import clock, metrics
from reconciliation.actors import system_actor
from reconciliation.audit.models import AuditAction
from reconciliation.audit.repository import GENESIS_HASH, AuditRepository
from reconciliation.cases.models import Case, Evidence, case_id_for
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import CaseState, CaseType, Disposition, Queue
from reconciliation.claims.ledger import LedgerRepository
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, Pledge, claim_pk
from reconciliation.claims.opening import case_open
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS
from reconciliation.stores import PLEDGE_STREAM, Store, pledge_stream_parts, stream_tag

logger = logging.getLogger(__name__)


# --- what the check reads and keeps: a region's pledge changes (its by_day index), its
# ledger totals, and the check's checkpoint item ------------------------------------------

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


@dataclass(frozen=True)
class PledgeChanges:
    """What one region's ``by_day`` index holds for a window (:func:`pledge_changes`)."""

    owned: list[Change]  # of the streams the region owns, oldest first
    named_elsewhere: list[Change]  # of streams named for another region (``landed`` set)
    queries: int  # how many Queries reading them took


def _days(after: str, until: str) -> list[date]:
    first, last = clock.parse_iso(after).date(), clock.parse_iso(until).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def pledge_changes(store: Store, after: str, until: str) -> PledgeChanges:
    """The receipts and voids of pledge streams in ``store``'s region with
    ``after < at <= until``, from its ``by_day`` index (eventually consistent: see the
    settle window in casework/drift.py): those of the streams it owns, those of streams
    named for another region (``landed`` set: replicas, or strays that ``strays`` tells
    apart), and how many Queries that took. A void's amount is its stream's receipt."""
    audit = AuditRepository(store)
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
    open: dict[str, dict[str, Any]] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)
    # Per ``fund#currency``: what stray recordings added to ledger shards under another
    # region's names (shards no region's own total reads).
    strays: dict[str, Decimal] = field(default_factory=dict)

    def body(self) -> str:
        def plain(value: Any) -> Any:
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

        def money(d: dict[str, Any]) -> dict[str, Decimal]:
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
        kwargs: dict[str, Any] = {
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


# --- the LEDGER_DRIFT case of one finding: the intents it names and its opening. It lives in
# the first region; its id derives from the scope, fund, currency and checkpoint version,
# so opening it twice is a no-op. --------------------------------------------------------


def winner(pledge: Pledge) -> str:
    """The region tag the pledge item's ledger key names (its write is the one kept)."""
    fund_part = pledge.ledger_key.rsplit("#", 1)[0]
    return fund_part.partition("@")[2]


def named_intents(
    scope: str,
    key: str,
    changes: dict[str, list[Change]],
    every: list[Change],
    duplicates: dict[str, str],
    missing: set[str],
    pledges: dict[str, Pledge | None],
) -> list[dict[str, Any]]:
    """The intents a case names: overall, the duplicates and the missing pledges of the
    fund; in a region, its changes of the fund read this run (none of them explains a
    ledger that moved without a pledge, but they are what changed)."""
    out = []
    if scope == ALL:
        for change in every:
            if change.key != key or not change.is_receipt:
                continue
            pledge = pledges.get(change.intent_id)
            if change.intent_id in duplicates and (
                change.is_stray or (pledge and winner(pledge) != change.region)
            ):
                why = "duplicate"  # the receipt the pledges table did not keep, or a stray
            elif change.intent_id in missing:
                why = "missing"
            else:
                continue
            out.append(_row(change, why))
    else:
        out = [_row(c, "changed") for c in changes[scope] if c.key == key]
    return out


def _row(change: Change, why: str) -> dict[str, Any]:
    return {
        "intent_id": change.intent_id,
        # Where it was recorded: a stray's region is where it landed, not what it names.
        "region": change.landed if change.landed is not None else change.region,
        "stream": change.stream,
        "amount": str(change.amount),
        "at": change.at,
        "why": why,
    }


def drift_case_open(
    store: Store, scope: str, key: str, diff: Decimal, facts: dict[str, Any], seen: int
) -> str:
    """Open the LEDGER_DRIFT case of one finding (a no-op when it exists: its id derives
    from the scope, the fund and currency, and the checkpoint version it was found at)."""
    fund, _, currency = key.partition("#")
    now = clock.iso(clock.now())
    case_id = case_id_for(f"DRIFT#{scope}#{key}", seen, CaseType.LEDGER_DRIFT)
    case = Case(
        case_id=case_id,
        case_type=CaseType.LEDGER_DRIFT,
        state=CaseState.OPEN,
        version=1,
        opened_at=now,
        claim_pk="",
        claim_version=0,
        intent_id="",
        tenant="",
        fund=fund,
        amount=abs(diff),
        currency=currency,
        request_token="",
        token_issued_at="",
        audit_seq=0,
        audit_head=GENESIS_HASH,
        queue=Queue.LEDGER_DRIFT,
        queue_sort=f"{now}#{case_id}",
        evidence=Evidence(drift=facts),
        last_action_at=now,
        in_totals=True,
    )
    stored, _ = case_open(store, case=case, actor=system_actor())
    return stored.case_id


# --- the check ---------------------------------------------------------------------------

NAMED_INTENTS = 20  # intents a case names at most (the count says how many in all)


def _setting(name: str) -> int:
    """``LEDGER_DRIFT_SETTLE_S`` or ``LEDGER_DRIFT_CONFIRM_MS`` (dashboard/settings.py)."""
    return int(getattr(settings, name))


@dataclass
class DriftReport:
    opened: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    changes: int = 0
    queries: int = 0
    skipped: bool = False
    lost_race: bool = False

    def lines(self) -> list[str]:
        if self.skipped:
            return ["ledger drift: checked recently; not due"]
        return [
            f"ledger drift: {self.changes} pledge changes read, "
            f"{len(self.opened)} cases opened, {len(self.duplicates)} cross-region duplicates",
            *(f"  opened {c}" for c in self.opened),
            *(f"  moving, left to the next run: {d}" for d in self.deferred),
        ]


def _pledges(
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


def _settle_resolved(ckpt: Checkpoint, store: Store) -> None:
    """Drop the cases resolved since the last run (one GetItem per open drift case); a
    DRIFT_EXPLAINED one leaves its difference accepted for good."""
    for case_id, meta in list(ckpt.open.items()):
        case = CaseRepository(store).get(case_id)
        if case is None or not case.is_resolved:
            continue
        if case.resolution and case.resolution.disposition == Disposition.DRIFT_EXPLAINED:
            scope = ckpt.accepted.setdefault(meta["scope"], {})
            scope[meta["key"]] = scope.get(meta["key"], Decimal(0)) + Decimal(meta["difference"])
        del ckpt.open[case_id]


def _pending(ckpt: Checkpoint, scope: str, key: str) -> Decimal:
    """What the scope's open cases report for ``key``."""
    open_cases = ckpt.open.values()
    found = (Decimal(m["difference"]) for m in open_cases if (m["scope"], m["key"]) == (scope, key))
    return sum(found, Decimal(0))


def _beyond(ckpt: Checkpoint, scope: str, key: str, diff: Decimal) -> Decimal:
    """The part of ``diff`` (net of accepted differences) no open case reports: none when
    it equals theirs, or when it is gone (corrected before its case was resolved)."""
    pending = _pending(ckpt, scope, key)
    return Decimal(0) if diff in (0, pending) else diff - pending


def ledger_drift_check(
    stores: Sequence[Store],
    *,
    home: Callable[[str], Store],
    force: bool = False,
) -> DriftReport:
    """Run the check once over every region (``every_store()``, the first region first;
    ``home`` resolves a claim key's home region). Unless ``force``, a run within
    ``LEDGER_DRIFT_INTERVAL_S`` of the last does nothing but read the checkpoint."""
    report = DriftReport()
    first = stores[0]
    ckpt = CheckpointRepository(first).get()
    now = clock.now()
    if not force and ckpt.checked_at:
        age = (now - clock.parse_iso(ckpt.checked_at)).total_seconds()
        if age < settings.LEDGER_DRIFT_INTERVAL_S:
            report.skipped = True
            return report
    until = clock.iso(now)
    settle_to = clock.iso(now - timedelta(seconds=_setting("LEDGER_DRIFT_SETTLE_S")))
    after = ckpt.watermark or settle_to
    watermark = max(after, settle_to)
    by_tag = {s.tag: s for s in stores}
    changes: dict[str, list[Change]] = {}
    foreign: list[Change] = []
    for store in stores:
        read = pledge_changes(store, after, until)
        changes[store.tag] = read.owned
        foreign.extend(read.named_elsewhere)
        report.queries += read.queries
    every = [c for found in changes.values() for c in found]
    stray = strays(foreign, every, by_tag)
    report.changes = len(every) + len(stray)
    keys = {c.key for c in every + stray} | {k for d in ckpt.expected.values() for k in d}
    ledgers = {s.tag: ledger_totals(s, keys) for s in stores}
    _settle_resolved(ckpt, first)

    pledges = _pledges(every + stray, home, by_tag)
    duplicates: dict[str, str] = {}
    missing: set[str] = set()
    # What each change adds to the pledge side: its amount if the pledge item kept it.
    pledge_delta: dict[Change, Decimal] = {}
    counted: set[str] = set()  # intents whose receipt counts on the pledge side
    for change in every + stray:  # strays last: an owner's record counts first
        pledge = pledges[change.intent_id]
        if pledge is None:
            missing.add(change.intent_id)
            pledge_delta[change] = Decimal(0)
        elif winner(pledge) != change.region or (
            change.is_stray and change.is_receipt and change.intent_id in counted
        ):
            if change.is_receipt:
                duplicates[change.intent_id] = max(change.at, duplicates.get(change.intent_id, ""))
            pledge_delta[change] = Decimal(0)
        else:
            pledge_delta[change] = change.amount
            if change.is_receipt:
                counted.add(change.intent_id)

    new = Checkpoint(
        version=ckpt.version + 1,
        watermark=watermark,
        checked_at=until,
        accepted={s: dict(d) for s, d in ckpt.accepted.items()},
        open=dict(ckpt.open),
        reported={i: at for i, at in ckpt.reported.items() if at > watermark},
        strays=dict(ckpt.strays),
    )
    expected: dict[str, dict[str, Decimal]] = defaultdict(dict)
    first_sight: set[str] = set()
    pledge_side: dict[str, Decimal] = {}
    stray_side: dict[str, Decimal] = {}
    for key in sorted(keys):
        bases = Decimal(0)
        for store in stores:
            mine = [c for c in changes[store.tag] if c.key == key]
            total = sum((c.amount for c in mine), Decimal(0))
            settled = sum((c.amount for c in mine if c.at <= watermark), Decimal(0))
            base = ckpt.expected.get(store.tag, {}).get(key)
            if base is None:  # first sight: the ledger as read is the baseline
                base = ledgers[store.tag][key] - total
                first_sight.add(key)
            bases += base
            expected[store.tag][key] = base + total
            new.expected.setdefault(store.tag, {})[key] = base + settled
        mine = [c for c in every + stray if c.key == key]
        total = sum((pledge_delta[c] for c in mine), Decimal(0))
        settled = sum((pledge_delta[c] for c in mine if c.at <= watermark), Decimal(0))
        base_p = ckpt.pledges.get(key, bases)
        pledge_side[key] = base_p + total
        new.pledges[key] = base_p + settled
        # Ledger additions under another region's names: no region's own total has them.
        strayed = [c for c in stray if c.key == key]
        base_s = ckpt.strays.get(key, Decimal(0))
        stray_side[key] = base_s + sum((c.amount for c in strayed), Decimal(0))
        if stray_side[key] or key in ckpt.strays:
            new.strays[key] = base_s + sum(
                (c.amount for c in strayed if c.at <= watermark), Decimal(0)
            )

    findings: list[tuple[str, str, Decimal]] = []
    for key in sorted(keys):
        for store in stores:
            diff = ledgers[store.tag][key] - expected[store.tag][key]
            diff = _beyond(ckpt, store.tag, key, diff - _accepted(ckpt, store.tag, key))
            if diff:
                findings.append((store.tag, key, diff))
        ledger_side = sum((expected[s.tag][key] for s in stores), stray_side[key])
        overall = ledger_side - pledge_side[key]
        overall = _beyond(ckpt, ALL, key, overall - _accepted(ckpt, ALL, key))
        if overall:
            findings.append((ALL, key, overall))
    suspects = first_sight | {key for _, key, _ in findings}
    moving = _moving(suspects, stores, (after, changes), ledgers, report) if suspects else set()
    report.deferred.extend(f"{scope} {key}" for scope, key, _ in findings if key in moving)
    findings = [f for f in findings if f[1] not in moving]
    for key in first_sight & moving:  # a baseline read while it moved: take it next run
        if key not in ckpt.pledges:
            new.pledges.pop(key, None)
        for tag in by_tag:
            if key not in ckpt.expected.get(tag, {}):
                new.expected.get(tag, {}).pop(key, None)

    for intent, at in sorted(duplicates.items()):
        if intent not in ckpt.reported:
            report.duplicates.append(intent)  # counted once this run's checkpoint holds
        if at > watermark:
            new.reported[intent] = at
    for scope, key, diff in findings:
        fund, _, currency = key.partition("#")
        named = named_intents(scope, key, changes, every + stray, duplicates, missing, pledges)
        for row in named:  # by name: a stored map may not hold the first region's "" key
            row["region_name"] = by_tag[row["region"]].region_name
        facts = {
            "scope": scope,
            "regions": sorted(by_tag[t].region_name for t in by_tag if scope in (ALL, t)),
            "fund": fund,
            "currency": currency,
            "ledger_total": str(
                sum((ledgers[t][key] for t in by_tag if scope in (ALL, t)), Decimal(0))
                + (stray_side[key] if scope == ALL else 0)
            ),
            "pledges_total": str(pledge_side[key] if scope == ALL else expected[scope][key]),
            "already_reported": str(_accepted(ckpt, scope, key) + _pending(ckpt, scope, key)),
            "difference": str(diff),
            "since": after,
            "until": until,
            "intents": named[:NAMED_INTENTS],
            "intent_count": len(named),
        }
        case_id = drift_case_open(first, scope, key, diff, facts, ckpt.version)
        report.opened.append(case_id)
        new.open[case_id] = {"scope": scope, "key": key, "difference": str(diff)}
    try:
        CheckpointRepository(first).put(new, seen=ckpt.version)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != ErrorCode.CONDITION_FAILED:
            raise
        report.lost_race = True  # another run advanced it; its cases have our ids
        report.duplicates = []  # and it counts the duplicates both runs found
        return report
    # Counted only by the run whose checkpoint records them: of two overlapping runs, one
    # (a crash between the write and here loses a count rather than doubling one).
    metrics.CROSS_REGION_DUPLICATES.inc(len(report.duplicates))
    for case_id in report.opened:
        scope = new.open[case_id]["scope"]
        metrics.LEDGER_DRIFT_FOUND.labels("all" if scope == ALL else "region").inc()
    return report


def _accepted(ckpt: Checkpoint, scope: str, key: str) -> Decimal:
    return ckpt.accepted.get(scope, {}).get(key, Decimal(0))


def _moving(
    suspects: set[str],
    stores: Sequence[Store],
    first_read: tuple[str, dict[str, list[Change]]],
    ledgers: dict[str, dict[str, Decimal]],
    report: DriftReport,
) -> set[str]:
    """Which of ``suspects`` (funds with a difference, or first seen) moved during the run:
    read after ``LEDGER_DRIFT_CONFIRM_MS``, the window holds a change the first read did
    not, whatever its time stamp (a commit claimed before the run may land after its
    Query: its receipt is back-dated), or the ledger total differs. The window is read
    again, so a suspected difference or a new fund costs a second read of it."""
    time.sleep(_setting("LEDGER_DRIFT_CONFIRM_MS") / 1000)
    after, seen = first_read
    later = clock.iso(clock.now())
    moving: set[str] = set()
    for store in stores:
        read = pledge_changes(store, after, later)
        report.queries += read.queries
        moving |= {c.key for c in set(read.owned) - set(seen[store.tag])}
        again = ledger_totals(store, suspects)
        moving |= {k for k in suspects if again[k] != ledgers[store.tag][k]}
    return moving & suspects
