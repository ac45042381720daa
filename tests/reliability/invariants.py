"""The invariants every reliability scenario must leave true (docs/design.md §3–§7).

Read back from the tables themselves (tests may Scan; no request path does), never from
what the clients were told:

1. per fund and currency, the ledger equals the sum (and count) of RECORDED pledges;
2. no duplicate pledge: one pledge item and one ``pledge_recorded`` receipt per intent,
   and no pledge whose claim carries a different payload or token;
3. every case's ``version`` equals the number of events in its ``CASE#`` stream (each
   case change has exactly one audit event), and its stored head is the stream's head;
   no ``CASE#`` stream without its case;
4. every audit chain verifies (seq 1..n without gaps, each hash recomputed, each
   ``prev_hash`` linking to its predecessor), both over the scanned events and through
   ``audit_verify`` (what ``manage.py verify_audit`` runs), which must find every stream
   through the ``by_day`` index;
5. after a sweep, nothing is lost: no claim is PENDING past its lease without a case
   that a person or the retry task can act on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from reconciliation import clock
from reconciliation.audit.chains import chain_check
from reconciliation.audit.regions import pledge_item_stream
from reconciliation.audit.verify import audit_verify
from reconciliation.cases.vocabulary import CaseState
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    PledgeStatus,
    claim_pk,
)
from reconciliation.claims.request import PledgeRequest
from reconciliation.stores import PLEDGE_STREAM, every_store, pledge_stream_parts
from tests.helpers import AS_SYSTEM, scan_all
from tests.helpers import cases as case_items


@dataclass
class InvariantReport:
    pledges: int = 0
    recorded: int = 0
    claims: Counter = field(default_factory=Counter)
    cases_by_type: Counter = field(default_factory=Counter)
    cases_open: int = 0
    streams: int = 0
    events: int = 0
    ledger: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def figures(self) -> dict:
        return {
            "pledges": self.pledges,
            "recorded": self.recorded,
            "claims": dict(self.claims),
            "cases_by_type": dict(self.cases_by_type),
            "cases_open": self.cases_open,
            "audit_streams": self.streams,
            "audit_events": self.events,
            "ledger": self.ledger,
        }


def _claim_pk(pledge: dict) -> str:
    key = pledge["intent_id"].split("#", 1)[1]
    return claim_pk(pledge["tenant"], OPERATION_CREATE_PLEDGE, key)


def _payload_hash(pledge: dict) -> str:
    return PledgeRequest.from_normalised(
        {
            "donor_ref": pledge["donor_ref"],
            "fund": pledge["fund"],
            "amount": f"{Decimal(str(pledge['amount'])):.2f}",
            "currency": pledge["currency"],
        }
    ).payload_hash


def check_invariants(ddb, *, swept: bool = True) -> InvariantReport:  # noqa: C901, PLR0915
    """Check every invariant over the scenario's tables; ``report.problems`` lists each
    violation in words (empty when all hold)."""
    report = InvariantReport()
    pledges = scan_all(ddb, ddb.tables.pledges)
    claims = {c["pk"]: c for c in scan_all(ddb, ddb.tables.idempotency_keys)}
    ledger = scan_all(ddb, ddb.tables.ledger)
    cases = case_items(ddb)
    streams: dict[str, list[dict]] = defaultdict(list)
    for event in scan_all(ddb, ddb.tables.audit_events):
        streams[event["stream"]].append(event)
    for events in streams.values():
        events.sort(key=lambda e: int(e["seq"]))
    problems = report.problems
    report.pledges = len(pledges)
    report.claims = Counter(c.get("status", "?") for c in claims.values())
    report.streams = len(streams)
    report.events = sum(len(e) for e in streams.values())

    # 1. ledger = sum of RECORDED pledges, per fund and currency (count and amount).
    recorded: dict[tuple[str, str], tuple[Decimal, int]] = {}
    for pledge in pledges:
        if pledge.get("status") != PledgeStatus.RECORDED:
            continue
        report.recorded += 1
        amount, count = recorded.get((pledge["fund"], pledge["currency"]), (Decimal(0), 0))
        recorded[(pledge["fund"], pledge["currency"])] = (
            amount + Decimal(str(pledge["amount"])),
            count + 1,
        )
    booked: dict[tuple[str, str], tuple[Decimal, int]] = {}
    for item in ledger:
        fund_currency = (item.get("fund_code", "?"), item.get("currency", "?"))
        amount, count = booked.get(fund_currency, (Decimal(0), 0))
        booked[fund_currency] = (
            amount + Decimal(str(item.get("pledged_total", 0))),
            count + int(item.get("pledge_count", 0)),
        )
    for fund_currency in sorted(set(recorded) | set(booked)):
        want = recorded.get(fund_currency, (Decimal(0), 0))
        have = booked.get(fund_currency, (Decimal(0), 0))
        name = "#".join(fund_currency)
        report.ledger[name] = f"{have[0]} ({have[1]})"
        if want != have:
            problems.append(
                f"ledger {name}: booked {have[0]} over {have[1]} pledges, "
                f"recorded pledges sum to {want[0]} over {want[1]}"
            )

    # 2. no duplicate pledge, and no pledge that disagrees with its claim.
    intents = Counter(p["intent_id"] for p in pledges)
    problems.extend(f"{i}: {n} pledge items" for i, n in intents.items() if n > 1)
    for pledge in pledges:
        receipts = [
            e
            for e in streams.get(pledge_item_stream(pledge), [])
            if e.get("action") == "pledge_recorded"
        ]
        if len(receipts) != 1:
            problems.append(f"{pledge['intent_id']}: {len(receipts)} pledge_recorded receipts")
        claim = claims.get(_claim_pk(pledge))
        if claim is None:
            continue
        if claim.get("payload_hash") != _payload_hash(pledge):
            problems.append(f"{pledge['intent_id']}: the claim's payload differs from the pledge")
        if claim.get("request_token") != pledge.get("request_token"):
            problems.append(f"{pledge['intent_id']}: the pledge carries another token")
    pledged = {p["intent_id"] for p in pledges}
    for stream in streams:
        if stream.startswith(PLEDGE_STREAM) and pledge_stream_parts(stream)[0] not in pledged:
            problems.append(f"{stream}: a receipt without its pledge")

    # 3. one audit event per case change.
    case_ids = set()
    for case in cases:
        case_ids.add(case["case_id"])
        report.cases_by_type[case["case_type"]] += 1
        report.cases_open += case["state"] != CaseState.RESOLVED
        events = streams.get(f"CASE#{case['case_id']}", [])
        if int(case["version"]) != len(events):
            problems.append(
                f"case {case['case_id']}: version {case['version']} but {len(events)} events"
            )
        elif events and (
            int(case["audit_seq"]) != int(events[-1]["seq"])
            or case["audit_head"] != events[-1]["hash"]
        ):
            problems.append(f"case {case['case_id']}: stored head is not the stream's head")
    for stream in streams:
        if stream.startswith("CASE#") and stream.removeprefix("CASE#") not in case_ids:
            problems.append(f"{stream}: events without their case")

    # 4. every chain verifies.
    for stream, events in sorted(streams.items()):
        status = chain_check(stream, events)
        if not status.ok:
            problems.append(f"chain {status.line()}")

    verified = audit_verify(
        since=clock.now().date() - timedelta(days=1), store=AS_SYSTEM.store, stores=every_store()
    )
    problems.extend(f"verify_audit: {p}" for p in verified.problems)
    if verified.streams != len(streams) or verified.events != report.events:
        problems.append(
            f"verify_audit saw {verified.streams} streams / {verified.events} events, "
            f"the table holds {len(streams)} / {report.events}"
        )

    # 5. nothing lost: a claim past its lease is finished or followed by a case.
    if swept:
        now = clock.epoch()
        by_id = {c["case_id"]: c for c in cases}
        for claim in claims.values():
            if claim.get("status") != ClaimStatus.PENDING or int(claim.get("expires_at", 0)) > now:
                continue
            if claim.get("intent_id") in pledged:
                # Committed; only the claim's finalisation was lost: the case (if any)
                # or the next replay reads the durable record.
                continue
            followed = by_id.get(claim.get("case_id") or "")
            if followed is None:
                problems.append(f"{claim['pk']}: PENDING past its lease with no case (lost)")
    return report


def assert_invariants(ddb, *, swept: bool = True) -> InvariantReport:
    report = check_invariants(ddb, swept=swept)
    assert report.ok, "invariants violated:\n" + "\n".join(report.problems[:50])
    return report
