"""Reconciliation cases as values: case ids, the ``Case`` record with its parts
(override request, resolution, retry, client outcome, evidence, request) and its item
translation. Their vocabulary (types, states, queues, dispositions) is
:mod:`reconciliation.cases.vocabulary`; the per-queue counters are
:mod:`reconciliation.cases.counters`. The repository that reads and writes them is
:mod:`reconciliation.cases.repository`."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, overload

from reconciliation.actors import Role
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    ErrorKind,
    Override,
    Queue,
    ReasonCode,
    RetryStatus,
    case_question,
)
from reconciliation.dynamo.cancellation import DecodedReason
from reconciliation.dynamo.items import from_item, to_item
from reconciliation.dynamo.tables import donor_search_key, subject_day_shard
from reconciliation.stores import tagged_case_id

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef


# --- the parts of a case ---------------------------------------------------------------
# Each part is stored as JSON text inside the case item (``case_to_item``), so each has
# one translator pair: ``from_json`` reads what any version wrote (a key an older item
# lacks reads as its default; a code no enum names is kept as its string), and
# ``to_json`` writes back exactly the keys and values today's writers store: a key a
# writer leaves out when it has no value (``_present``) is absent, never null.


def _present(**values: Any) -> dict[str, Any]:
    """The keys that have a value: optional keys are left out, not written as null."""
    return {k: v for k, v in values.items() if v is not None}


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Requester:
    """Who asked for an override, as the audit trail names an actor (``Actor.as_audit``)."""

    username: str
    email: str | None = None
    role: Role | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Requester:
        return cls(
            username=str(data.get("username", "")),
            email=data.get("email"),
            role=None if data.get("role") is None else Role.read(data["role"]),
        )

    def to_json(self) -> dict[str, Any]:
        # ``as_audit`` writes all three keys, an unknown email as null.
        return {"username": self.username, "email": self.email, "role": self.role}


@dataclass(frozen=True)
class OverrideRequest:
    """A pending four-eyes request (``case.override``), pinned to the case version it was
    raised against, with what its evidence saw (the claim version for a release, the
    pledge's audit sequence for a void)."""

    request_id: str
    action: Override
    requested_by: Requester
    reason_code: ReasonCode
    reason_text: str
    requested_at: str
    pinned_version: int
    # Epoch seconds; an item without it never expires (as the expiry sweep reads it).
    expires_at: int | None = None
    # Where the case returns when the request is rejected or expires; OPEN when unknown.
    prior_state: CaseState | None = None
    claim_version: int | None = None
    pledge_audit_seq: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OverrideRequest:
        prior = data.get("prior_state")
        return cls(
            request_id=str(data.get("request_id", "")),
            action=Override.read(data.get("action", "")),
            requested_by=Requester.from_json(data.get("requested_by") or {}),
            reason_code=ReasonCode.read(data.get("reason_code", "")),
            reason_text=str(data.get("reason_text", "")),
            requested_at=str(data.get("requested_at", "")),
            pinned_version=int(data.get("pinned_version", 0)),
            expires_at=_opt_int(data.get("expires_at")),
            prior_state=CaseState.read(prior) if prior else None,
            claim_version=_opt_int(data.get("claim_version")),
            pledge_audit_seq=_opt_int(data.get("pledge_audit_seq")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "action": self.action,
            "requested_by": self.requested_by.to_json(),
            "reason_code": self.reason_code,
            "reason_text": self.reason_text,
            "requested_at": self.requested_at,
            "pinned_version": self.pinned_version,
            **_present(
                expires_at=self.expires_at,
                prior_state=self.prior_state,
                claim_version=self.claim_version,
                pledge_audit_seq=self.pledge_audit_seq,
            ),
        }

    @property
    def return_state(self) -> CaseState:
        """The state a rejected or expired request returns the case to."""
        return self.prior_state or CaseState.OPEN

    def expired(self, now: int) -> bool:
        """Whether the request has run out at epoch second ``now``."""
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True)
class Resolution:
    """How a case was decided (``case.resolution``): the disposition or approved override,
    who decided and when; for an override, who asked; for a background retry, its outcome,
    who asked for it, and the case that took over the intent when its outcome was unclear."""

    disposition: Disposition | Override
    by: str
    at: str
    requested_by: str | None = None
    # A retry's outcome: a RetryStatus or the commit's OutcomeKind (claims sits above
    # cases, so an outcome kind is kept as the string it is stored as).
    outcome: RetryStatus | str | None = None
    asked_by: str | None = None
    superseded_by: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Resolution:
        how = data.get("disposition", "")
        outcome = data.get("outcome")
        return cls(
            disposition=Disposition.of(how) or Override.read(how),
            by=str(data.get("by", "")),
            at=str(data.get("at", "")),
            requested_by=_opt_str(data.get("requested_by")),
            outcome=None if outcome is None else RetryStatus.read(outcome),
            asked_by=_opt_str(data.get("asked_by")),
            superseded_by=_opt_str(data.get("superseded_by")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "disposition": self.disposition,
            "by": self.by,
            "at": self.at,
            **_present(
                requested_by=self.requested_by,
                outcome=self.outcome,
                asked_by=self.asked_by,  # absent on retries resolved before it was kept
                superseded_by=self.superseded_by,
            ),
        }


@dataclass(frozen=True)
class CommitRetry:
    """A background commit retry asked for on a case (``case.retry``): queued until its
    task runs, then its outcome (``status``) and when it finished."""

    # A RetryStatus, or once run the commit's OutcomeKind, kept as the stored string
    # (claims sits above cases), or "key_reused".
    status: RetryStatus | str
    requested_by: str | None = None
    requested_at: str | None = None
    request_id: str | None = None
    finished_at: str | None = None  # absent while queued, and on retries before it was kept

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommitRetry:
        return cls(
            status=RetryStatus.read(data.get("status", "")),
            requested_by=_opt_str(data.get("requested_by")),
            requested_at=_opt_str(data.get("requested_at")),
            request_id=_opt_str(data.get("request_id")),
            finished_at=_opt_str(data.get("finished_at")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            **_present(
                requested_by=self.requested_by,
                requested_at=self.requested_at,
                request_id=self.request_id,
                finished_at=self.finished_at,
            ),
        }

    @property
    def finished(self) -> bool:
        return bool(self.finished_at)


@dataclass(frozen=True)
class ClientOutcome:
    """What the client was told when the case opened (``case.client_outcome``): the error
    kind, an ErrorKind or the intake's OutcomeKind (kept as its stored string); none when
    nothing is recorded."""

    error: ErrorKind | str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientOutcome:
        error = data.get("error")
        return cls(error=None if error is None else ErrorKind.read(error))

    def to_json(self) -> dict[str, Any]:
        return _present(error=self.error)

    def __bool__(self) -> bool:
        return self.error is not None


@dataclass(frozen=True)
class CaseRequest:
    """The pledge request the claim carried (its normalised form, ``case.request``); empty
    on a fund-level case, which has no claim."""

    donor_ref: str | None = None
    fund: str | None = None
    amount: str | None = None  # the normalised text ("25.00"), as hashed for the claim
    currency: str | None = None
    # The claim's ``Pledge-Version`` (reconciliation/claims/versions.py); absent on a
    # case opened before versions existed, or on a claim stored before them (the first).
    pledge_version: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CaseRequest:
        return cls(
            donor_ref=_opt_str(data.get("donor_ref")),
            fund=_opt_str(data.get("fund")),
            amount=_opt_str(data.get("amount")),
            currency=_opt_str(data.get("currency")),
            pledge_version=_opt_str(data.get("pledge_version")),
        )

    def versioned(self, pledge_version: str | None) -> CaseRequest:
        """This request with the version its claim was stored under (if it names one)."""
        return replace(self, pledge_version=pledge_version) if self else self

    def normalised(self) -> dict[str, Any]:
        """The normalised request as the claim carried it, without its version."""
        return _present(
            donor_ref=self.donor_ref, fund=self.fund, amount=self.amount, currency=self.currency
        )

    def to_json(self) -> dict[str, Any]:
        return {**self.normalised(), **_present(pledge_version=self.pledge_version)}

    def __bool__(self) -> bool:
        return bool(self.to_json())


_EVIDENCE_FIELDS = (
    "claim",
    "observed_at",
    "token_age_s",
    "token_window_s",
    "inside_token_window",
    "pledge_exists",
    "pledge",
    "error_code",
    "error_message",
    "drift",
    "ack",
)


@dataclass(frozen=True)
class Evidence:
    """What was observed when the case opened (``case.evidence``): the claim and its token,
    the commit's error, the sweep's pledge read, or a drift check's finding.

    Free-form by design: each opener records the facts it has (the claim's snapshot and a
    drift finding are other packages' shapes, kept as plain mappings), so the facts the
    pages and services read are fields, and whatever else an opener wrote is kept in
    ``extra`` as stored, so it is shown and written back unchanged. A fact stored as null
    stays in ``extra`` too, so it is written back as null."""

    claim: Mapping[str, Any] | None = None
    observed_at: str | None = None
    token_age_s: int | None = None
    token_window_s: int | None = None
    inside_token_window: bool | None = None
    pledge_exists: bool | None = None
    pledge: Mapping[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    drift: Mapping[str, Any] | None = None
    # An undelivered acknowledgement (reconciliation/acks/undelivered.py): the endpoint,
    # event type, webhook-id, attempts and what the last attempt heard.
    ack: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        facts = {k: data[k] for k in _EVIDENCE_FIELDS if data.get(k) is not None}
        extra = {k: v for k, v in data.items() if k not in facts}
        return cls(**facts, extra=extra)

    def to_json(self) -> dict[str, Any]:
        facts = {k: getattr(self, k) for k in _EVIDENCE_FIELDS}
        return {**self.extra, **_present(**facts)}

    def __bool__(self) -> bool:
        return bool(self.to_json())


# The drill's synthetic intents (``manage.py drill``, reconciliation/ops/drill.py) belong
# to this tenant, and so do their cases (``Case.tenant``): how the lists people work from
# tell a rehearsal from a real pledge, and leave it out unless asked.
DRILL_TENANT = "drill"
WALK_PAGE = 100  # rows a page when a sweep walks a whole queue
# What case_id_for makes: "C-", 16 base32 characters, "-<region>" outside the first region
# (docs/regions.md). Counter items share the table (``#COUNT#<QUEUE>#<n>``), and a typed
# id may exceed DynamoDB's 2,048-byte key (a ValidationException): neither is a case.
CASE_ID_PATTERN = "C-[A-Z2-7]{16}(?:-[a-z][a-z0-9-]{0,31})?"
_CASE_ID_RE = re.compile(CASE_ID_PATTERN)


def case_id_for(source: str, version: int, case_type: CaseType, region_tag: str = "") -> str:
    """Stable id from the source (claim key + version) and the question the case asks:
    ``C-`` and 16 base32 characters, then the region the case lives in unless it is the
    first (``region_tag``, ``Store.tag``). A late worker's TOKEN_MISMATCH on a claim
    version the sweep already opened as STUCK_PENDING is a different problem, so a case
    of its own."""
    question = case_question(case_type)
    suffix = "" if question == "did_it_commit" else f"#{question}"
    digest = hashlib.sha256(f"{source}@{version}{suffix}".encode()).digest()
    return tagged_case_id("C-" + base64.b32encode(digest).decode()[:16], region_tag)


def is_case_id(value: str) -> bool:
    """Whether ``value`` has the shape of a case id (the whole string, no newline)."""
    return isinstance(value, str) and _CASE_ID_RE.fullmatch(value) is not None


def resolved_month(at: str) -> str:
    """The ``resolved_by_time`` partition of a resolution at ISO instant ``at``:
    ``R#YYYY-MM``. Resolutions are staff actions (a few hundred a week), so a month's
    partition is never hot, and a page of the newest reads one or two partitions."""
    return f"R#{at[:7]}"


@dataclass(frozen=True)
class Case:
    case_id: str
    case_type: CaseType
    state: CaseState
    version: int
    opened_at: str
    claim_pk: str
    claim_version: int
    intent_id: str
    tenant: str
    fund: str
    amount: Decimal
    currency: str
    request_token: str
    token_issued_at: str
    audit_seq: int
    audit_head: str
    queue: Queue | None = None
    queue_sort: str | None = None
    decoded: tuple[DecodedReason, ...] = ()
    evidence: Evidence = field(default_factory=Evidence)
    client_outcome: ClientOutcome = field(default_factory=ClientOutcome)
    last_actor: str = "system"
    last_action_at: str = ""
    assignee: str | None = None
    override: OverrideRequest | None = None
    resolution: Resolution | None = None
    last_action_id: str | None = None
    request: CaseRequest = field(default_factory=CaseRequest)
    retry: CommitRetry | None = None
    # Whether this case's amount is in its queue counters' per-currency totals: set on
    # cases opened since the totals were kept; older cases move the counts only.
    in_totals: bool = False
    # Whether this case's counter moves carry the drill's share (``drill_open_count`` and
    # its totals, reconciliation/cases/counters.py): set on drill cases opened since that
    # share was kept, so a drill case opened before it never takes away what it never
    # added. Stored on drill cases only (``None`` is not stored).
    drill_tallied: bool = False
    # Sparse index keys: ``by_donor_key`` (its folded donor_ref, set when opened) and
    # ``resolved_by_time`` (resolved_month, resolved_sort, set while resolved).
    donor_ref: str | None = None
    resolved_month: str | None = None
    resolved_sort: str | None = None
    # Who resolved the case and how (its disposition or override), top-level so the
    # resolved list can filter on them; the full record is ``resolution``.
    resolved_by: str | None = None
    resolved_how: str | None = None

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.partition("#")[2]  # none on a fund-level case

    @property
    def subject(self) -> str:
        """Its intent, or for a fund-level case (ledger drift) its fund's ledger."""
        return self.intent_id or f"{self.fund} {self.currency} ledger"

    # What the pages ask of a case, by name rather than by code.
    @property
    def is_stuck(self) -> bool:
        return self.case_type == CaseType.STUCK_PENDING

    @property
    def is_ambiguous(self) -> bool:
        return self.case_type == CaseType.AMBIGUOUS_TIMEOUT

    @property
    def is_token_mismatch(self) -> bool:
        return self.case_type == CaseType.TOKEN_MISMATCH

    @property
    def is_cancelled(self) -> bool:
        """A cancelled or token-mismatched transaction: nothing of it was written."""
        return self.case_type in (CaseType.CANCELLED_TRANSACTION, CaseType.TOKEN_MISMATCH)

    @property
    def is_drift(self) -> bool:  # fund-level: no claim; its finding is evidence.drift
        return self.case_type == CaseType.LEDGER_DRIFT

    @property
    def is_ack_undelivered(self) -> bool:  # the pledge is recorded; evidence.ack says what failed
        return self.case_type == CaseType.ACK_UNDELIVERED

    @property
    def awaits_approval(self) -> bool:
        return self.state == CaseState.OVERRIDE_REQUESTED

    @property
    def is_resolved(self) -> bool:
        return self.state == CaseState.RESOLVED

    @property
    def is_drill(self) -> bool:
        """One of the drill's rehearsal cases (``DRILL_TENANT``), left out of real lists."""
        return self.tenant == DRILL_TENANT

    def summary(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "version": self.version,
            "queue": self.queue,
            "assignee": self.assignee,
            "override": self.override.to_json() if self.override else None,
            "resolution": self.resolution.to_json() if self.resolution else None,
        }


# The parts stored as JSON text, each read by its record's translator. Kept as text:
# free-form evidence must never trip DynamoDB's type rules (floats, empty sets) and is
# read back exactly as written.
_PARTS: dict[str, Any] = {
    "evidence": Evidence,
    "client_outcome": ClientOutcome,
    "override": OverrideRequest,
    "resolution": Resolution,
    "request": CaseRequest,
    "retry": CommitRetry,
}


def decoded_row(item: Mapping[str, Any]) -> dict[str, Any]:
    """Plain values of a stored case or index row, its parts read into their records
    (``decoded`` a tuple of :class:`DecodedReason`); a part stored as JSON null, or not a
    JSON object, reads as absent."""
    data: dict[str, Any] = from_item(item)
    if isinstance(data.get("decoded"), str):
        rows = json.loads(data["decoded"])
        data["decoded"] = tuple(
            DecodedReason.from_json(r) for r in rows or () if isinstance(r, Mapping)
        )
    for name, record in _PARTS.items():
        if isinstance(data.get(name), str):
            value = json.loads(data[name])
            data[name] = record.from_json(value) if isinstance(value, Mapping) else None
    return data


@overload
def case_from_item(item: Mapping[str, Any]) -> Case: ...
@overload
def case_from_item(item: Mapping[str, Any] | None) -> Case | None: ...
def case_from_item(item: Mapping[str, Any] | None) -> Case | None:
    if item is None:
        return None
    data = decoded_row(item)
    data["amount"] = Decimal(str(data.get("amount", 0)))
    data.update({k: data.get(k, "") for k in ("fund", "intent_id")})  # not stored when empty
    data["case_type"] = CaseType.read(data["case_type"])
    data["state"] = CaseState.read(data["state"])
    if data.get("queue") is not None:
        data["queue"] = Queue.read(data["queue"])
    # A part that may not be absent reads as empty, as a case built without it holds.
    for name in ("evidence", "client_outcome", "request"):
        if data.get(name) is None:
            data.pop(name, None)
    if data.get("decoded") is None:
        data.pop("decoded", None)
    known = Case.__dataclass_fields__
    return Case(**{k: v for k, v in data.items() if k in known})


# Attributes keying an index: DynamoDB refuses an empty string there, so an empty one is
# not stored and the case is absent from that index (a LEDGER_DRIFT case has no intent).
_INDEX_KEY_FIELDS = ("fund", "intent_id", "donor_ref", "assignee")


def case_to_item(case: Case) -> dict[str, AttributeValueTypeDef]:
    data: dict[str, Any] = {k: getattr(case, k) for k in Case.__dataclass_fields__}
    for name in _INDEX_KEY_FIELDS:
        if data[name] == "":
            data[name] = None
    data["decoded"] = [r.to_json() for r in case.decoded]
    data["drill_tallied"] = True if case.drill_tallied else None
    for name in _PARTS:
        if data[name] is not None:
            data[name] = data[name].to_json()
    for name in ("decoded", *_PARTS):
        if data[name] is not None:
            data[name] = json.dumps(data[name], sort_keys=True, default=str)
    # The day it was opened, for verification's walk over subjects (``by_day``).
    data["day_shard"] = subject_day_shard(case.case_id, case.opened_at)
    # The folded donor ref keys ``by_donor_key`` (search in any letter case); the ref
    # itself is kept as given, for the pages.
    if case.donor_ref:
        data["donor_key"] = donor_search_key(case.donor_ref)
    return to_item(data)


class _HasRetry(Protocol):
    @property
    def state(self) -> str: ...
    @property
    def retry(self) -> CommitRetry | None: ...


def retry_in_flight(case: _HasRetry) -> bool:
    """Whether a commit retry was asked for on this open case and has not finished: the
    background task has yet to run, or is waiting for the claim's lease to end. A case or
    a queue row (both carry ``state`` and ``retry``). A retry whose task died stays
    queued until the sweep dispatches it again, so it is never in flight for ever."""
    retry = case.retry
    return retry is not None and not retry.finished and case.state != CaseState.RESOLVED
