"""The intake request log (``requests`` table): every answer the intake API
gave, kept ``REQUEST_LOG_TTL_S`` (TTL is cost control: nothing decides anything from it).

Two writers, neither a round trip of its own on the request path: a new pledge's entry
is one more item of the commit's transaction (:func:`intake_request_of_commit`, built
from the claim alone), so it is written with the pledge or not at all; every other answer
(replays, refusals, 409, 202, 503, lookups) goes through the process's buffer and is
written off the request path in batches (:mod:`reconciliation.claims.request_log_buffer`).

An entry is keyed ``subject`` (HASH: ``KEY#{tenant}#{key}``, or ``TENANT#{tenant}`` when
the request was refused before a key was known) and ``at_id`` (RANGE: the time, then a
request id, so two answers in one millisecond never overwrite each other). A refused
request (the edge says which: 4xx) also carries ``rejected_shard``
(``{tenant}#{YYYY-MM-DD}#{n}``), the key of the sparse ``rejected_by_day`` index, so a
tenant's refusals of one day are ``REJECTED_SHARDS`` Queries, never a Scan, and one
tenant's burst of bad requests is spread over that many partitions.

Nothing of the donor beyond the ref is stored: no amount, fund or body.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from reconciliation import clock
from reconciliation.claims.models import Claim
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.request import PledgeRequest
from reconciliation.dynamo.items import from_item, to_item, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store

REJECTED_SHARDS = 4
# Entries a pledge page or a day's refusals show at most (newest first).
LOG_PAGE = 100


def key_subject(tenant: str, idempotency_key: str) -> str:
    return f"KEY#{tenant}#{idempotency_key}"


def tenant_subject(tenant: str) -> str:
    return f"TENANT#{tenant}"


def rejected_shard(tenant: str, day: str, request_id: str) -> str:
    """``{tenant}#{YYYY-MM-DD}#{n}``, ``n`` from a hash of the request id."""
    n = int(hashlib.sha256(request_id.encode()).hexdigest()[:8], 16) % REJECTED_SHARDS
    return f"{tenant}#{day}#{n}"


@dataclass(frozen=True)
class IntakeRequest:
    """One answer of the intake API. ``outcome`` is what the API said: its outcome kind
    (``created``, ``replayed``) or its ``error`` code (``missing_key``,
    ``idempotency_key_reused``); ``status`` the HTTP status the edge sent, ``None`` on
    the entry a pledge's commit wrote (:func:`intake_request_of_commit`: below the edge
    no status is known, and the edge answers its outcome, ``created``, by its own table);
    ``idempotency_key`` empty when the request was refused before a key was known."""

    tenant: str
    idempotency_key: str
    at: str
    status: int | None
    outcome: str
    replayed: bool
    rejected: bool
    correlation_id: str
    request_id: str
    donor_ref: str = ""
    case_id: str = ""
    # What a request refused for reusing a key with another body asked for (422): the
    # key's page shows it beside what the key recorded. ``None`` on every other answer.
    asked: PledgeRequest | None = None

    @property
    def outcome_kind(self) -> OutcomeKind | None:
        """The outcome in the intake's vocabulary, when it is one (error codes of the
        edge, such as ``missing_key``, are not)."""
        return OutcomeKind.of(self.outcome)

    @property
    def subject(self) -> str:
        if self.idempotency_key:
            return key_subject(self.tenant, self.idempotency_key)
        return tenant_subject(self.tenant)

    @property
    def with_pledge(self) -> bool:
        """Whether the pledge's commit wrote this entry (in its own transaction)."""
        return self.status is None


@dataclass(frozen=True)
class IntakeAnswer:
    """What the edge answered one request: its HTTP ``status``, the outcome kind or error
    code, whether that was a refusal (the edge says which: 4xx) and a replay, and the
    case it opened."""

    status: int
    outcome: str
    rejected: bool
    replayed: bool = False
    case_id: str = ""


def intake_request_new(
    *,
    tenant: str,
    idempotency_key: str,
    answer: IntakeAnswer,
    correlation_id: str = "",
    donor_ref: str = "",
    asked: PledgeRequest | None = None,
) -> IntakeRequest:
    """The log's entry of ``answer`` to a request now, under a new request id."""
    return IntakeRequest(
        tenant=tenant,
        idempotency_key=idempotency_key,
        at=clock.iso(clock.now()),
        status=answer.status,
        outcome=answer.outcome,
        replayed=answer.replayed,
        rejected=answer.rejected,
        correlation_id=correlation_id,
        request_id=uuid.uuid4().hex[:16],
        donor_ref=donor_ref,
        case_id=answer.case_id,
        asked=asked,
    )


def intake_request_of_commit(claim: Claim) -> IntakeRequest:
    """The entry a pledge's commit writes in its own transaction: the answer that commit
    is given, ``created``. Every value comes from the claim (its time, its request's
    correlation id and donor ref; the request id from its token and version), never from
    the clock or a fresh id, so every send of the commit under the claim's
    ``ClientRequestToken`` carries the same item: the SDK's and the application's
    retries, and a RETRY_COMMIT rebuilding the attempt's transaction from the claim
    minutes later in another process. A changed item under the same token would be
    refused (``IdempotentParameterMismatch``) where the transaction had applied."""
    attempt = hashlib.sha256(f"{claim.request_token}:{claim.version}".encode()).hexdigest()
    return IntakeRequest(
        tenant=claim.tenant,
        idempotency_key=claim.idempotency_key,
        at=claim.claimed_at,
        status=None,
        outcome=OutcomeKind.CREATED,
        replayed=False,
        rejected=False,
        correlation_id=claim.correlation_id,
        request_id=attempt[:16],
        donor_ref=str(claim.request.get("donor_ref", "")),
    )


def _from_item(item: dict[str, Any]) -> IntakeRequest:
    data = from_item(item)
    return IntakeRequest(
        tenant=data.get("tenant", ""),
        idempotency_key=data.get("idempotency_key", ""),
        at=data.get("at", ""),
        status=int(data["status"]) if "status" in data else None,
        outcome=data.get("outcome", ""),
        replayed=bool(data.get("replayed", False)),
        rejected="rejected_shard" in data,
        correlation_id=data.get("correlation_id", ""),
        request_id=data.get("request_id", ""),
        donor_ref=data.get("donor_ref", ""),
        case_id=data.get("case_id", ""),
        asked=_asked(data.get("asked")),
    )


def _asked(stored: Any) -> PledgeRequest | None:
    """The ``asked`` map as written by :func:`request_log_item`; ``None`` when absent or
    unreadable (the log is for reading: a bad entry loses that detail, not the page)."""
    if not isinstance(stored, dict):
        return None
    try:
        return PledgeRequest.from_normalised(stored)
    except (KeyError, ArithmeticError, ValueError, TypeError):
        return None


def request_log_item(entry: IntakeRequest) -> dict[str, AttributeValueTypeDef]:
    """``entry`` as the ``requests`` item, whichever way it is written (the commit's Put,
    or the buffer's BatchWriteItem)."""
    data: dict[str, Any] = {
        "subject": entry.subject,
        "at_id": f"{entry.at}#{entry.request_id}",
        "tenant": entry.tenant,
        "idempotency_key": entry.idempotency_key or None,
        "at": entry.at,
        "status": entry.status,
        "outcome": entry.outcome,
        "replayed": entry.replayed,
        "correlation_id": entry.correlation_id or None,
        "request_id": entry.request_id,
        "donor_ref": entry.donor_ref or None,
        "case_id": entry.case_id or None,
        "asked": entry.asked.normalised() if entry.asked else None,
        # TTL: cost control only (DynamoDB deletes up to 48 h late; nothing reads it to
        # decide anything). Counted from the answer's own time, so the commit's entry is
        # the same on every send; like the claim's purge delay it is a setting every
        # process shares, and a change of it between an unclear commit and its
        # RETRY_COMMIT inside the token window could at worst meet a token mismatch (a
        # TOKEN_MISMATCH case, nothing recorded twice).
        "purge_at": int(clock.parse_iso(entry.at).timestamp()) + settings.REQUEST_LOG_TTL_S,
    }
    if entry.rejected:
        data["rejected_shard"] = rejected_shard(entry.tenant, entry.at[:10], entry.request_id)
    return to_item(data)


class RequestLogRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.requests

    def put_item(self, entry: IntakeRequest) -> dict[str, Any]:
        """``entry`` as a transaction item: a plain Put, with nothing to condition on. Its
        ``at_id`` names one answer (for the commit's entry, one attempt of the commit),
        and the transaction applies at most once: a later send of it is cancelled by the
        pledge's own ``attribute_not_exists``."""
        return {"Put": {"TableName": self.table, "Item": request_log_item(entry)}}

    def for_key(self, tenant: str, idempotency_key: str) -> list[IntakeRequest]:
        """Every answer given for one key, newest first (one Query)."""
        response = self.client.query(
            TableName=self.table,
            KeyConditionExpression="subject = :s",
            ExpressionAttributeValues=values(s=key_subject(tenant, idempotency_key)),
            ScanIndexForward=False,
            Limit=LOG_PAGE,
        )
        return [_from_item(i) for i in response.get("Items", [])]

    def rejected_on(self, tenant: str, day: str) -> list[IntakeRequest]:
        """A tenant's refused requests of one UTC day, newest first (one Query per shard
        of ``rejected_by_day``, merged)."""
        rows: list[IntakeRequest] = []
        for n in range(REJECTED_SHARDS):
            response = self.client.query(
                TableName=self.table,
                IndexName="rejected_by_day",
                KeyConditionExpression="rejected_shard = :s",
                ExpressionAttributeValues=values(s=f"{tenant}#{day}#{n}"),
                ScanIndexForward=False,
                Limit=LOG_PAGE,
            )
            rows.extend(_from_item(i) for i in response.get("Items", []))
        rows.sort(key=lambda r: (r.at, r.request_id), reverse=True)
        return rows[:LOG_PAGE]


def requests_for_key(tenant: str, idempotency_key: str, *, store: Store) -> list[IntakeRequest]:
    """The request log of one key, in its home region ``store``, newest first."""
    return RequestLogRepository(store).for_key(tenant, idempotency_key)


def rejections_on(tenant: str, day: str, *, stores: list[Store]) -> list[IntakeRequest]:
    """A tenant's refused requests of ``day`` (``YYYY-MM-DD``) in every region of
    ``stores`` (each written where its key lives), newest first; a replica seen in two
    regions is listed once."""
    seen: set[str] = set()
    rows: list[IntakeRequest] = []
    for store in stores:
        for row in RequestLogRepository(store).rejected_on(tenant, day):
            if row.request_id not in seen:
                seen.add(row.request_id)
                rows.append(row)
    rows.sort(key=lambda r: (r.at, r.request_id), reverse=True)
    return rows[:LOG_PAGE]
