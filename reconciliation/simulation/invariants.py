"""What must hold after every scenario of the fault explorer, at rest (docs/design.md §3-§7).

Read back from the tables themselves (a Scan: the explorer and tests only, never a request
path) and from what the explorer saw on the wire, never from what the system says about
itself: an invariant checked against the system's own account of events cannot catch the
system lying.

1. one pledge per intent, one receipt per pledge, and per fund and currency the ledger
   equals the sum of RECORDED pledges;
2. truthful answers: a definite failure only when no commit of that request applied or
   may have applied; 201/200 only when the pledge exists; every answer is JSON with a
   documented ``error``;
3. nothing lost: the intent is recorded, or its client was told a definite failure, or
   exactly one open case follows it; no PENDING claim leaves the stuck-claim index without
   a case, no COMPLETED claim lacks its pledge, and an unrecorded intent whose problem
   the system noticed (it sent a case opening) has a case at rest: that one, or another
   (the sweep's, when the opening itself failed and the claim stayed in the index);
4. two different problems never share one case (STUCK_PENDING and AMBIGUOUS_TIMEOUT on one
   claim version ask one question, "did it commit?", and share theirs);
5. every case's ``version`` is the number of its events, its stored head is its stream's
   head, and every audit chain verifies;
6. every write of a claim, pledge, case or audit event carries its fence (the condition
   on the version, attempt or absence its writer relied on).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from reconciliation.audit.chains import chain_check
from reconciliation.audit.models import AuditAction
from reconciliation.audit.regions import pledge_item_stream
from reconciliation.cases.counters import COUNTER_PREFIX
from reconciliation.cases.vocabulary import CaseState, CaseType, case_question
from reconciliation.claims.models import ClaimStatus, PledgeStatus
from reconciliation.dynamo.client import TableNames
from reconciliation.dynamo.items import from_item

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

LEDGER = "1 one pledge, ledger = pledges"
TRUTH = "2 truthful answers"
LOST = "3 nothing lost"
ONE_PROBLEM = "4 one problem per case"
AUDIT = "5 case history and audit chains"
FENCED = "6 every write fenced"
ESCAPED = "0 no exception escapes"

# A pledge in these states was recorded: an approved VOID_PLEDGE voids a recorded pledge,
# and the intent is then neither lost nor owed a case.
WAS_RECORDED = frozenset({PledgeStatus.RECORDED, PledgeStatus.VOIDED})

# Key attributes per table role: what a delete needs, and what names a transaction item.
KEY_ATTRIBUTES = {
    "idempotency_keys": ("pk",),
    "pledges": ("intent_id",),
    "ledger": ("fund",),
    "cases": ("case_id",),
    "audit_events": ("stream", "seq"),
}
# Error codes the intake view answers with besides the outcome kinds of its STATUS map:
# field errors (400), authentication (401), the rate limit (429) and the recovery GET's 404.
VIEW_ERRORS = frozenset(
    {
        "invalid_request",
        "missing_key",
        "invalid_key",
        "invalid_pledge_version",
        "unknown_pledge_version",
        "body_too_large",
        "malformed_json",
        "unauthorized",
        "token_unknown",
        "token_revoked",
        "token_expired",
        "rate_limited",
        "not_found",
    }
)


@dataclass(frozen=True)
class Problem:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass
class Answer:
    """One API request as the client lived it, with what the wire knows of its commits."""

    episode: str
    method: str
    status: int | None = None  # None: no answer, the serving process died
    error: str | None = None
    retry_after: int = 0
    json: bool = True
    escaped: str | None = None  # an exception left the view: the client saw an HTML 500
    pledge_exists: bool = False  # a consistent read right after the answer
    commit_applied: bool = False  # the engine answered 200 to a commit call of this request
    commit_maybe: bool = False  # a commit call of this request met a fault that hides that

    @property
    def definite_failure(self) -> bool:
        return self.status is not None and self.status >= 400

    def describe(self) -> str:
        if self.status is None:
            return f"{self.episode} no answer"
        return f"{self.episode} {self.status} {self.error or ''}".rstrip()


@dataclass
class Snapshot:
    """Every item of the scenario's tables, raw (for deletes) and plain (for checks)."""

    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def scan(
        cls, client: DynamoDBClient, names: TableNames, roles: Iterable[str] = tuple(KEY_ATTRIBUTES)
    ) -> Snapshot:
        snapshot = cls()
        for role in roles:
            pages = client.get_paginator("scan").paginate(
                TableName=getattr(names, role), ConsistentRead=True
            )
            snapshot.raw[role] = [item for page in pages for item in page.get("Items", [])]
        return snapshot

    def plain(self, role: str) -> list[dict[str, Any]]:
        return [from_item(i) for i in self.raw.get(role, [])]

    def cases(self) -> list[dict[str, Any]]:
        # Counters (``#COUNT#…``) and the configuration record (``#CONFIG#…``) are no cases.
        return [
            c for c in self.plain("cases") if not c["case_id"].startswith(("#", COUNTER_PREFIX))
        ]

    def streams(self) -> dict[str, list[dict[str, Any]]]:
        streams: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for event in self.plain("audit_events"):
            streams[event["stream"]].append(event)
        for events in streams.values():
            events.sort(key=lambda e: int(e["seq"]))
        return streams


def check_at_rest(
    snapshot: Snapshot,
    *,
    intent_id: str,
    answers: list[Answer],
    case_opens: Iterable[tuple[str, str]],
    documented: frozenset[str],
    unfenced: Iterable[tuple[str, str]] = (),
) -> list[Problem]:
    """Every invariant over one scenario; empty when all hold."""
    return [
        *ledger_problems(snapshot),
        *answer_problems(answers, documented),
        *lost_problems(snapshot, intent_id, answers),
        *unrecorded_problems(snapshot, intent_id, case_opens),
        *case_type_problems(case_opens),
        *audit_problems(snapshot),
        *fence_problems(unfenced),
    ]


def ledger_problems(snapshot: Snapshot) -> list[Problem]:
    """Invariant 1: a pledge at most once, and the ledger equal to the RECORDED pledges."""
    pledges = snapshot.plain("pledges")
    problems = [
        Problem(LEDGER, f"{intent}: {n} pledge items")
        for intent, n in Counter(p["intent_id"] for p in pledges).items()
        if n > 1
    ]
    streams = snapshot.streams()
    for pledge in pledges:
        receipts = [
            e
            for e in streams.get(pledge_item_stream(pledge), [])
            if e.get("action") == AuditAction.PLEDGE_RECORDED
        ]
        if len(receipts) != 1:
            problems.append(Problem(LEDGER, f"{len(receipts)} pledge_recorded receipts"))
    # Sums of money and counts by (fund, currency, "amount" | "count").
    recorded: defaultdict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    counted: defaultdict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for pledge in pledges:
        if pledge.get("status") == PledgeStatus.RECORDED:
            recorded[(pledge["fund"], pledge["currency"], "amount")] += Decimal(
                str(pledge["amount"])
            )
            recorded[(pledge["fund"], pledge["currency"], "count")] += 1
    for item in snapshot.plain("ledger"):
        fund_currency = (item.get("fund_code", "?"), item.get("currency", "?"))
        counted[(*fund_currency, "amount")] += Decimal(str(item.get("pledged_total", 0)))
        counted[(*fund_currency, "count")] += int(item.get("pledge_count", 0))
    for key in sorted(set(recorded) | set(counted)):
        if recorded[key] != counted[key]:
            fund, currency, what = key
            problems.append(
                Problem(
                    LEDGER,
                    f"ledger {fund}#{currency} {what} is {counted[key]}, "
                    f"the RECORDED pledges sum to {recorded[key]}",
                )
            )
    return problems


def answer_problems(answers: list[Answer], documented: frozenset[str]) -> list[Problem]:
    """Invariant 2 (and 0 for the view): what the client was told matches what happened."""
    problems: list[Problem] = []
    for answer in answers:
        if answer.escaped:
            problems.append(Problem(ESCAPED, f"{answer.episode}: {answer.escaped} (an HTML 500)"))
            continue
        if answer.status is None:
            continue
        problems.extend(Problem(TRUTH, text) for text in _untruths(answer, documented))
    return problems


def _untruths(answer: Answer, documented: frozenset[str]) -> list[str]:
    said = answer.describe()
    out = []
    if not answer.json:
        out.append(f"{said}: the body is not JSON")
    elif (
        answer.status is not None
        and (answer.status >= 400 or answer.status == 202)
        and answer.error not in documented
    ):
        out.append(f"{said}: {answer.error!r} is not a documented error code")
    if answer.method == "POST" and answer.definite_failure:
        if answer.commit_applied:
            out.append(f"{said}: a definite failure, yet its commit was applied")
        elif answer.commit_maybe:
            out.append(
                f"{said}: a definite failure after a commit attempt that may have applied "
                "(only 201/200/202 may follow one)"
            )
    if answer.status in (200, 201) and not answer.pledge_exists:
        out.append(f"{said}: success, yet no pledge is recorded")
    if answer.method == "GET" and answer.status == 404 and answer.pledge_exists:
        out.append(f"{said}: not found, yet the pledge is recorded")
    return out


def lost_problems(snapshot: Snapshot, intent_id: str, answers: list[Answer]) -> list[Problem]:
    """Invariant 3: the intent is recorded, refused, or followed by exactly one case."""
    problems: list[Problem] = []
    pledged = {p["intent_id"] for p in snapshot.plain("pledges") if p.get("status") in WAS_RECORDED}
    cases = snapshot.cases()
    case_ids = {c["case_id"] for c in cases}
    open_cases = [
        c for c in cases if c["intent_id"] == intent_id and c["state"] != CaseState.RESOLVED
    ]
    last = answers[-1] if answers else None
    refused = last is not None and last.definite_failure
    if intent_id not in pledged and not refused and len(open_cases) != 1:
        told = last.describe() if last else "no request"
        problems.append(
            Problem(
                LOST,
                f"not recorded, the client's last answer was {told}, and "
                f"{len(open_cases)} open cases follow the intent (exactly one must)",
            )
        )
    for claim in snapshot.plain("idempotency_keys"):
        status = claim.get("status")
        unfollowed = claim.get("case_id") not in case_ids
        if status == ClaimStatus.PENDING and not claim.get("pending_shard") and unfollowed:
            problems.append(
                Problem(
                    LOST,
                    f"claim v{claim.get('version')} left the pending index while PENDING "
                    f"without an existing case (case_id {claim.get('case_id')!r})",
                )
            )
        if status == ClaimStatus.COMPLETED and claim.get("intent_id") not in pledged:
            problems.append(
                Problem(LOST, f"claim v{claim.get('version')} is COMPLETED without its pledge")
            )
    return problems


def unrecorded_problems(
    snapshot: Snapshot, intent_id: str, case_opens: Iterable[tuple[str, str]]
) -> list[Problem]:
    """Invariant 3, continued: a case the system set out to open is not lost with its
    claim (a cancelled transaction whose case write failed must not finalise the claim
    out of the stuck-claim index, where only the sweep could still find it)."""
    pledged = any(
        p["intent_id"] == intent_id and p.get("status") in WAS_RECORDED
        for p in snapshot.plain("pledges")
    )
    cases = {c["case_id"] for c in snapshot.cases() if c["intent_id"] == intent_id}
    attempted = {case_id for case_id, _type in case_opens}
    # Recorded, the question the case would have asked is answered.
    if pledged or not attempted or cases:
        return []
    return [
        Problem(
            LOST,
            f"the system tried to open {', '.join(sorted(attempted))} and no case for the "
            "intent exists at rest",
        )
    ]


def case_type_problems(case_opens: Iterable[tuple[str, str]]) -> list[Problem]:
    """Invariant 4: one case id was never attempted for two different case types."""
    types: dict[str, set[str]] = defaultdict(set)
    for case_id, case_type in case_opens:
        # Types asking one question (STUCK_PENDING, AMBIGUOUS_TIMEOUT) share their case.
        types[case_id].add(case_question(CaseType.read(case_type)))
    return [
        Problem(ONE_PROBLEM, f"case {case_id} was opened as {' and '.join(sorted(kinds))}")
        for case_id, kinds in sorted(types.items())
        if len(kinds) > 1
    ]


def audit_problems(snapshot: Snapshot) -> list[Problem]:
    """Invariant 5: no case change without its event, and every chain intact."""
    streams = snapshot.streams()
    problems: list[Problem] = []
    subjects: list[tuple[str, dict[str, Any], str | None]] = [
        (f"CASE#{c['case_id']}", c, "version") for c in snapshot.cases()
    ]
    subjects += [(pledge_item_stream(p), p, None) for p in snapshot.plain("pledges")]
    for stream, item, version_field in subjects:
        events = streams.get(stream, [])
        if version_field and int(item.get(version_field, 0)) != len(events):
            problems.append(
                Problem(AUDIT, f"{stream}: version {item.get('version')}, {len(events)} events")
            )
        elif events and (
            int(item.get("audit_seq", 0)) != int(events[-1]["seq"])
            or item.get("audit_head") != events[-1]["hash"]
        ):
            problems.append(Problem(AUDIT, f"{stream}: the stored head is not the stream's head"))
    known = {stream for stream, _, _ in subjects}
    for stream, events in sorted(streams.items()):
        if stream.startswith(("CASE#", "PLEDGE#")) and stream not in known:
            problems.append(Problem(AUDIT, f"{stream}: {len(events)} events without their item"))
        status = chain_check(stream, events)
        if not status.ok:
            problems.append(Problem(AUDIT, f"chain {status.line()}"))
    return problems


def fence_problems(unfenced: Iterable[tuple[str, str]]) -> list[Problem]:
    """Invariant 6: every write that the wire saw carried its fence. A single life runs
    one worker at a time, so a missing fence rarely shows in its outcome; it shows on
    the wire (docs/design.md §4: a late worker must never complete or erase its successor's
    claim)."""
    return [Problem(FENCED, f"{point}: {text}") for point, text in dict.fromkeys(unfenced)]
