"""A claim as a value and as an item of ``idempotency_keys`` (docs/design.md §3, §4).

:class:`Claim` is the plain dataclass the rest of the code sees; :func:`claim_from_item`
and :func:`claim_to_item` translate it to and from DynamoDB's attribute values. The
writes that move a claim between states are in :mod:`reconciliation.claims.repository`.

``expires_at`` is the lease of a PENDING claim (and the range key of the stuck-claim
index), the end of a COMPLETED claim's replay window and of a FAILED claim's cool-off
(:data:`CLAIM_EXPIRIES` words each); the TTL attribute is ``purge_at``,
``CLAIM_PURGE_AFTER_S`` later. Were the lease itself the TTL attribute, DynamoDB could
delete a stuck PENDING claim before the sweep saw it (DynamoDB Local deletes expired
items within seconds; AWS within 48 h), and the crash would leave no case behind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings

from reconciliation import clock
from reconciliation.codes import Code
from reconciliation.currencies import amount_text
from reconciliation.dynamo.items import from_item, to_item
from reconciliation.dynamo.tables import PENDING_SHARDS
from reconciliation.stores import Store, home_store

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.dynamo.items import RawItem


class ClaimStatus(Code):
    """Where a claim on an idempotency key stands."""

    PENDING = (
        "PENDING",
        "Pending",
        "A worker holds the key under a lease and has not recorded an outcome.",
    )
    COMPLETED = "COMPLETED", "Completed", "The pledge is recorded; replays get its answer."
    FAILED = (
        "FAILED",
        "Failed",
        "Nothing was recorded; the client may retry with the same key.",
    )


@dataclass(frozen=True)
class ClaimExpiry:
    """What a claim's ``expires_at`` means while the claim is in one status, in the words
    staff read on the pledge page: the same attribute is a lease, a replay window or a
    cool-off."""

    label: str
    help: str


CLAIM_EXPIRIES: dict[ClaimStatus, ClaimExpiry] = {
    ClaimStatus.PENDING: ClaimExpiry(
        "Lease ends",
        "The worker holds the key until then; after it a retry may take the key over, "
        "and the sweep opens a stuck case.",
    ),
    ClaimStatus.COMPLETED: ClaimExpiry(
        "Replay window ends",
        "Until then a replay of this key is answered from the answer stored on the claim; "
        "after it, from the durable pledge record.",
    ),
    ClaimStatus.FAILED: ClaimExpiry(
        "Retry allowed after",
        "A cool-off: until then a replay is asked to retry later; after it the key may "
        "be claimed again.",
    ),
}
# A status no member names (an item written by hand or by a later version).
CLAIM_EXPIRY_UNKNOWN = ClaimExpiry("Expires", "When this claim's status ends.")


class PledgeStatus(Code):
    RECORDED = "RECORDED", "Recorded", "The pledge is on the ledger."
    VOIDED = "VOIDED", "Voided", "The pledge was reversed by an approved override."


OPERATION_CREATE_PLEDGE = "create_pledge"
# DynamoDB recognises a ClientRequestToken for 10 minutes; after that only the durable
# pledge key keeps a retry from applying twice.
TOKEN_WINDOW_S = 600


def claim_pk(tenant: str, operation: str, idempotency_key: str) -> str:
    return f"{tenant}#{operation}#{idempotency_key}"


def pledge_home(tenant: str, idempotency_key: str) -> Store:
    """The region that is home to a pledge's key (docs/regions.md): its claim, pledge and
    request-log entries live there. The edge (a view, a command, a task) resolves it once
    and hands it down; the services take the store they are given."""
    return home_store(claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key))


def purge_at(expires_at: int) -> int:
    """When TTL may delete the item: well after the lease, so sweeps always see it."""
    return expires_at + settings.CLAIM_PURGE_AFTER_S


def pending_shard(pk: str) -> str:
    """``P#0``..``P#15`` from a hash of the key, so no single index partition is hot."""
    return f"P#{int(hashlib.sha256(pk.encode()).hexdigest()[:8], 16) % PENDING_SHARDS}"


@dataclass(frozen=True)
class Claim:
    pk: str
    status: ClaimStatus
    version: int
    attempt_id: str
    payload_hash: str
    request_token: str
    token_issued_at: str
    created_at: str
    claimed_at: str
    expires_at: int
    tenant: str
    idempotency_key: str
    intent_id: str
    request: dict[str, Any]
    correlation_id: str = ""
    client_address: str = ""
    response: dict[str, Any] | None = None
    last_error_code: str | None = None
    case_id: str | None = None
    pending_shard: str | None = None
    # The ``Pledge-Version`` whose rules hashed ``payload_hash`` (reconciliation/claims/
    # versions.py); ``None`` on a claim stored before versions existed: the first.
    pledge_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def expired(self, now_epoch: int | None = None) -> bool:
        """TTL deletes up to 48 h late: the clock, not the item's presence, decides."""
        return self.expires_at <= (clock.epoch() if now_epoch is None else now_epoch)

    @property
    def expiry(self) -> ClaimExpiry:
        """What ``expires_at`` is in this claim's status (lease, replay window, cool-off)."""
        return CLAIM_EXPIRIES.get(self.status, CLAIM_EXPIRY_UNKNOWN)

    @property
    def token_issued(self) -> datetime:
        return clock.parse_iso(self.token_issued_at)

    @property
    def claimed(self) -> datetime:
        return clock.parse_iso(self.claimed_at)

    def token_evidence(self, now: datetime) -> dict[str, Any]:
        """What a case records of this claim and its token, observed at ``now``."""
        age = int((now - self.token_issued).total_seconds())
        return {
            "claim": self.snapshot(),
            "observed_at": clock.iso(now),
            "token_age_s": age,
            "token_window_s": TOKEN_WINDOW_S,
            "inside_token_window": age < TOKEN_WINDOW_S,
        }

    def snapshot(self) -> dict[str, Any]:
        """Plain evidence for a case or an audit event (no cached response body)."""
        return {
            "pk": self.pk,
            "status": self.status,
            "version": self.version,
            "attempt_id": self.attempt_id,
            "payload_hash": self.payload_hash,
            "request_token": self.request_token,
            "token_issued_at": self.token_issued_at,
            "created_at": self.created_at,
            "claimed_at": self.claimed_at,
            "expires_at": self.expires_at,
            "last_error_code": self.last_error_code,
            "case_id": self.case_id,
            "in_pending_index": self.pending_shard is not None,
        }


_KNOWN = {f for f in Claim.__dataclass_fields__ if f != "extra"}


def claim_from_item(item: RawItem | None) -> Claim | None:
    data = from_item(item)
    if data is None:
        return None
    plain = {k: v for k, v in data.items() if k in _KNOWN}
    plain["status"] = ClaimStatus.read(plain["status"])
    plain["request"] = json.loads(plain["request"]) if plain.get("request") else {}
    if plain.get("response"):
        plain["response"] = json.loads(plain["response"])
    return Claim(**plain, extra={k: v for k, v in data.items() if k not in _KNOWN})


def claim_to_item(claim: Claim) -> dict[str, AttributeValueTypeDef]:
    data = {k: getattr(claim, k) for k in _KNOWN}
    data["request"] = json.dumps(claim.request, sort_keys=True)
    data["response"] = json.dumps(claim.response, sort_keys=True) if claim.response else None
    data["purge_at"] = purge_at(claim.expires_at)
    return to_item(data)


def intent_id_for(tenant: str, idempotency_key: str) -> str:
    return f"{tenant}#{idempotency_key}"


@dataclass(frozen=True)
class ClaimKey:
    """The idempotency key a claim holds: the tenant and its key, the claim's partition
    key and the intent the claim records."""

    pk: str
    tenant: str
    idempotency_key: str
    intent_id: str

    @classmethod
    def of_pledge(cls, tenant: str, idempotency_key: str) -> ClaimKey:
        """The key of a pledge's claim (``OPERATION_CREATE_PLEDGE``)."""
        return cls(
            pk=claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key),
            tenant=tenant,
            idempotency_key=idempotency_key,
            intent_id=intent_id_for(tenant, idempotency_key),
        )


@dataclass(frozen=True)
class ClaimBody:
    """A request as a claim stores it: normalised, its hash, and the ``Pledge-Version``
    whose rules made both (``None``: the rules from before versions existed)."""

    payload_hash: str
    request: dict[str, Any]
    pledge_version: str | None = None


@dataclass(frozen=True)
class Pledge:
    intent_id: str
    tenant: str
    donor_ref: str
    fund: str
    amount: Decimal
    currency: str
    status: PledgeStatus
    request_token: str
    created_at: str
    ledger_key: str
    audit_seq: int = 1
    audit_head: str = ""
    voided_at: str | None = None
    # The ``Pledge-Version`` the request was recorded under (its claim's); ``None`` on a
    # pledge stored before versions existed: the first. Not in ``api_body`` or
    # ``snapshot``, so receipts and events hash as before.
    pledge_version: str | None = None

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.split("#", 1)[1]

    def normalised_request(self) -> dict[str, str]:
        return {
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": amount_text(self.amount, self.currency),
            "currency": self.currency,
        }

    def api_body(self) -> dict[str, Any]:
        """What the intake API returns: the client's own key, never the tenant prefix."""
        return {
            "intent_id": self.idempotency_key,
            "donor_ref": self.donor_ref,
            "fund": self.fund,
            "amount": amount_text(self.amount, self.currency),
            "currency": self.currency,
            "status": self.status,
            "created_at": self.created_at,
        }

    def snapshot(self) -> dict[str, Any]:
        return {**self.api_body(), "intent_id": self.intent_id, "ledger_key": self.ledger_key}


def pledge_from_item(item: RawItem | None) -> Pledge | None:
    data = from_item(item)
    if data is None:
        return None
    data["amount"] = Decimal(str(data["amount"]))
    data["status"] = PledgeStatus.read(data["status"])
    known = Pledge.__dataclass_fields__
    return Pledge(**{k: v for k, v in data.items() if k in known})
