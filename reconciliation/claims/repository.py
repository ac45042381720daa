"""Claim items in ``idempotency_keys``: ``PENDING → COMPLETED / FAILED`` (docs/design.md §3, §4).

:class:`ClaimRepository` writes every transition; the claim as a value, its item
translation and its key helpers are in :mod:`reconciliation.claims.models`
and are importable from here too.

Every transition is fenced: it is conditioned on the ``version`` (and where it matters
the ``attempt_id``) that its holder read, so a worker that lost its claim can never
complete, fail or delete its successor's claim.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.claims.models import (
    Claim,
    ClaimBody,
    ClaimKey,
    ClaimStatus,
    claim_from_item,
    claim_to_item,
    pending_shard,
    purge_at,
)
from reconciliation.dynamo.batch import batch_get
from reconciliation.dynamo.errors import ErrorCode
from reconciliation.dynamo.index_rows import complete_rows
from reconciliation.dynamo.items import from_item, to_item, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store


class ClaimTaken(Exception):
    """A conditional write on the claim failed; ``current`` is the item DynamoDB returned."""

    def __init__(self, current: Claim | None):
        super().__init__("claim condition failed")
        self.current = current


@contextmanager
def _taken_when_refused() -> Iterator[None]:
    """A conditional write on the claim inside: its condition refused means another
    caller holds the claim, raised as :class:`ClaimTaken` with the item ALL_OLD returns
    (no second read). Any other error rises as it is."""
    try:
        yield
    except ClientError as exc:
        if exc.response["Error"]["Code"] == ErrorCode.CONDITION_FAILED:
            raise ClaimTaken(claim_from_item(exc.response.get("Item"))) from exc
        raise


class ClaimRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.idempotency_keys

    @staticmethod
    def _key(pk: str) -> dict[str, AttributeValueTypeDef]:
        return {"pk": {"S": pk}}

    def get(self, pk: str, *, consistent: bool = True) -> Claim | None:
        response = self.client.get_item(
            TableName=self.table, Key=self._key(pk), ConsistentRead=consistent
        )
        return claim_from_item(response.get("Item"))

    def get_many(self, pks: list[str]) -> dict[str, Claim]:
        """The claims of ``pks`` found here, by key, read consistently (one BatchGetItem
        per 100): a list shows each row's claim at a cost that follows the page."""
        keys = [self._key(pk) for pk in dict.fromkeys(pks) if pk]
        found = (claim_from_item(item) for item in batch_get(self.client, self.table, keys))
        return {claim.pk: claim for claim in found if claim is not None}

    def new_claim(
        self,
        *,
        key: ClaimKey,
        body: ClaimBody,
        correlation_id: str,
        client_address: str,
        lease_s: int | None = None,
    ) -> Claim:
        """This request's claim attempt for ``key``, not yet written: built once, so every
        retry of its PutItem (or of its re-claim) carries the same ``attempt_id`` and token.
        ``lease_s`` is how long the claim is held (default ``CLAIM_PENDING_TTL_S``)."""
        now = clock.now()
        lease_s = settings.CLAIM_PENDING_TTL_S if lease_s is None else lease_s
        return Claim(
            pk=key.pk,
            status=ClaimStatus.PENDING,
            version=1,
            attempt_id=str(uuid.uuid4()),
            payload_hash=body.payload_hash,
            # Minted once per attempt; reused for every retry of exactly this attempt's
            # commit. A re-claim is a new attempt with a different transaction, so it
            # carries its own token: no token ever names two different transactions.
            request_token=str(uuid.uuid4()),
            token_issued_at=clock.iso(now),
            created_at=clock.iso(now),
            claimed_at=clock.iso(now),
            expires_at=clock.epoch(now) + lease_s,
            tenant=key.tenant,
            idempotency_key=key.idempotency_key,
            intent_id=key.intent_id,
            request=body.request,
            correlation_id=correlation_id,
            client_address=client_address,
            pending_shard=pending_shard(key.pk),
            pledge_version=body.pledge_version,
        )

    def create(self, claim: Claim) -> Claim:
        """First claim: one conditional PutItem. On failure ALL_OLD returns the existing
        item, so a duplicate costs this one round trip and no extra read."""
        with _taken_when_refused():
            self.client.put_item(
                TableName=self.table,
                Item=self._to_item(claim),
                # Closes the first-writer race: exactly one caller creates the claim.
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        return claim

    def reclaim(self, seen: Claim, *, attempt: Claim) -> Claim:
        """Take over a FAILED, expired PENDING (or, for a person's retry, COMPLETED
        without its pledge) claim for ``attempt``, built by :meth:`new_claim`.

        The claim takes the attempt's ``attempt_id``, token and lease: a re-claim is a new
        transaction, so it never reuses the previous attempt's ``ClientRequestToken``
        (docs/design.md §3), and when its response is lost and the SDK sends it again, the
        ``ALL_OLD`` item names this attempt, so the caller knows the claim is its own.
        ``version + 1`` fences the previous holder."""
        return self._update_fenced(
            seen,
            {
                "UpdateExpression": (
                    "SET #st = :pending, version = :next, attempt_id = :attempt, "
                    "request_token = :token, token_issued_at = :issued, "
                    "expires_at = :exp, purge_at = :purge, pending_shard = :shard, "
                    "claimed_at = :claimed, "
                    "correlation_id = :corr, client_address = :addr "
                    "REMOVE last_error_code, case_id, #resp"
                ),
                # version = :seen: another re-claimer that got there first wins.
                # status = :old and expires_at = :old_exp: the item is the one judged
                # re-claimable, not one that changed since it was read.
                "ConditionExpression": "version = :seen AND #st = :old AND expires_at = :old_exp",
                "ExpressionAttributeNames": {"#st": "status", "#resp": "response"},
                "ExpressionAttributeValues": values(
                    pending=ClaimStatus.PENDING,
                    next=seen.version + 1,
                    attempt=attempt.attempt_id,
                    token=attempt.request_token,
                    issued=attempt.token_issued_at,
                    exp=attempt.expires_at,
                    purge=purge_at(attempt.expires_at),
                    shard=pending_shard(seen.pk),
                    claimed=attempt.claimed_at,
                    corr=attempt.correlation_id,
                    addr=attempt.client_address,
                    seen=seen.version,
                    old=seen.status,
                    old_exp=seen.expires_at,
                ),
            },
        )

    def complete_item(self, claim: Claim, response_body: dict[str, Any]) -> dict[str, Any]:
        """Transaction item: PENDING→COMPLETED, fenced on the version this holder read.

        Every value derives from the claim itself (the expiry counts from the instant
        it was claimed, not from now), so a retry of the same commit is byte-identical,
        as ``ClientRequestToken`` requires."""
        return self.finalise_item(
            claim,
            status=ClaimStatus.COMPLETED,
            response_body=response_body,
            expires_in_s=settings.CLAIM_COMPLETED_TTL_S,
            at=claim.claimed,
        )

    def finalise(self, claim: Claim, end: Finalisation) -> Claim:
        """Move a claim to COMPLETED or FAILED outside the commit transaction, fenced on
        the version read. Raises :class:`ClaimTaken` if it changed meanwhile."""
        return self._update_fenced(claim, self.finalise_expression(claim, end))

    def finalise_item(self, claim: Claim, **end: Any) -> dict[str, Any]:
        """The same transition as :meth:`finalise`, as a transaction item (``end``: the
        fields of a :class:`Finalisation`)."""
        expression = self.finalise_expression(claim, Finalisation(**end))
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(claim.pk),
                **expression,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def finalise_expression(self, claim: Claim, end: Finalisation) -> dict[str, Any]:
        """The fenced transition's expression."""
        sets = _finalise_sets(claim, end)
        removes = ["pending_shard"]
        # The fence's value between the first four and the rest: the order the item has
        # always been sent in (a retried commit must be byte-identical).
        vals: dict[str, Any] = {
            **{placeholder: value for _, _, placeholder, value in sets[:4]},
            "v": claim.version,
            **{placeholder: value for _, _, placeholder, value in sets[4:]},
        }
        # version = :v fences a worker that lost its claim; status = PENDING (when
        # required) refuses to rewrite an outcome another party already recorded.
        condition = "version = :v"
        if end.require_pending:
            condition += " AND #st = :pending"
            vals["pending"] = ClaimStatus.PENDING
        names = {name: attribute for attribute, name, _, _ in sets if name.startswith("#")}
        return {
            "UpdateExpression": (
                f"SET {', '.join(f'{name} = :{ph}' for _, name, ph, _ in sets)} "
                f"REMOVE {', '.join(removes)}"
            ),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values(**vals),
        }

    @staticmethod
    def finalised(
        claim: Claim,
        *,
        status: ClaimStatus,
        expires_in_s: int,
        response_body: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> Claim:
        """The claim as :meth:`finalise_item`'s transition (with the same arguments, and
        the same ``at``) leaves it once its transaction commits, which returns no item:
        the same values set on the claim as read, through the translator a read goes
        through."""
        end = Finalisation(
            status=status, expires_in_s=expires_in_s, response_body=response_body, at=at
        )
        sets = _finalise_sets(claim, end)
        data = {**claim.extra, **from_item(claim_to_item(claim))}
        data.update({attribute: value for attribute, _, _, value in sets})
        data.pop("pending_shard", None)
        finalised = claim_from_item(to_item(data))
        assert finalised is not None
        return finalised

    def attach_case(self, claim: Claim, *, case_id: str, error_code: str) -> Claim:
        """Record that a case now tracks this PENDING claim and take it out of the
        stuck-claim index (the case, not the sweep, follows it from here). Fenced on the
        holder's version and attempt, so it never touches a successor's claim."""
        return self._update_fenced(claim, self._attach_expression(claim, case_id, error_code))

    def attach_item(self, claim: Claim, *, case_id: str, error_code: str) -> dict[str, Any]:
        """The same move as :meth:`attach_case`, as an item of the case's own transaction."""
        return {
            "Update": {
                "TableName": self.table,
                "Key": self._key(claim.pk),
                **self._attach_expression(claim, case_id, error_code),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    @staticmethod
    def _attach_expression(claim: Claim, case_id: str, error_code: str) -> dict[str, Any]:
        return {
            "UpdateExpression": "SET case_id = :case, last_error_code = :err REMOVE pending_shard",
            # status = PENDING: a finished claim needs no case to follow it. version and
            # attempt_id: the holder's own claim, never a successor's.
            "ConditionExpression": "#st = :pending AND version = :v AND attempt_id = :a",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": values(
                case=case_id,
                err=error_code,
                pending=ClaimStatus.PENDING,
                v=claim.version,
                a=claim.attempt_id,
            ),
        }

    def _update_fenced(self, claim: Claim, expression: dict[str, Any]) -> Claim:
        with _taken_when_refused():
            response = self.client.update_item(
                TableName=self.table,
                Key=self._key(claim.pk),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expression,
            )
        updated = claim_from_item(response["Attributes"])
        assert updated is not None
        return updated

    def pending_candidates(self, shard: str, older_than_epoch: int) -> tuple[list[str], float]:
        """Keys of PENDING claims in ``shard`` whose ``expires_at`` is before the bound,
        and the read units the Query consumed."""
        keys: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "pending_by_expiry",
            "KeyConditionExpression": "pending_shard = :s AND expires_at < :t",
            "ExpressionAttributeValues": values(s=shard, t=older_than_epoch),
            "ReturnConsumedCapacity": "TOTAL",
        }
        consumed = 0.0
        for page in self.client.get_paginator("query").paginate(**kwargs):
            consumed += page.get("ConsumedCapacity", {}).get("CapacityUnits", 0)
            rows = complete_rows(page.get("Items", []), ("pk",), index="pending_by_expiry")
            keys.extend(i["pk"]["S"] for i in rows)
        return keys, consumed

    # Claims are written with the model's own translator (beside the Claim), so what the
    # repository puts and what the model reads back cannot drift apart.
    _to_item = staticmethod(claim_to_item)


@dataclass(frozen=True, kw_only=True)
class Finalisation:
    """A claim's move to COMPLETED or FAILED: its status; how long the claim is kept,
    counted from ``at`` (default now; a COMPLETED claim records it as ``completed_at``);
    what it records; and whether the claim must still be PENDING (refusing to rewrite an
    outcome another party already recorded)."""

    status: ClaimStatus
    expires_in_s: int
    response_body: dict[str, Any] | None = None
    error_code: str | None = None
    payload_hash: str | None = None
    case_id: str | None = None
    require_pending: bool = True
    at: datetime | None = None


def _finalise_sets(claim: Claim, end: Finalisation) -> list[tuple[str, str, str, Any]]:
    """What a finalising transition sets, in the expression's order: per attribute, its
    name in the expression, its value's placeholder and the value (``pending_shard`` is
    removed besides)."""
    at = end.at or clock.now()
    expires_at = clock.epoch(at) + end.expires_in_s
    sets: list[tuple[str, str, str, Any]] = [
        ("status", "#st", "st", end.status),
        ("version", "version", "next", claim.version + 1),
        ("expires_at", "expires_at", "exp", expires_at),
        ("purge_at", "purge_at", "purge", purge_at(expires_at)),
    ]
    if end.status == ClaimStatus.COMPLETED:
        sets.append(("completed_at", "completed_at", "at", clock.iso(at)))
    if end.response_body is not None:
        sets.append(("response", "#resp", "resp", json.dumps(end.response_body, sort_keys=True)))
    if end.error_code is not None:
        sets.append(("last_error_code", "last_error_code", "err", end.error_code))
    if end.payload_hash is not None:
        sets.append(("payload_hash", "payload_hash", "ph", end.payload_hash))
    if end.case_id is not None:
        sets.append(("case_id", "case_id", "case", end.case_id))
    return sets
