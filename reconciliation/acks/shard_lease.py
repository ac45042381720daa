"""One dispatcher at a time per ``acks_due`` shard: the shard lease (docs/webhooks.md).

A dispatcher works a shard's due pledges only while it holds the shard's lease: the
item ``#ACKLEASE#<region>#A#<n>`` in the cases table, beside the other region-wide
items (``#CONFIG#…``, ``#COUNT#…``; every reader of cases skips keys starting ``#``).
It is taken with one conditional UpdateItem, when it ran out or is still ours, and
counts its takes in ``lease_fence``. Held across passes it costs nothing: it is renewed
only when less than half of it is left, or less than one attempt's timeouts, and it is
checked before every POST, so no POST starts that could still be running when the lease
runs out. One lease write per shard and pass at most, instead of one per pledge, is
what keeps an acknowledgement at +4 write units (docs/capacity.md).

The lease keeps two dispatchers from sending one pledge at once; it does not guard the
pledge's record. That is the pledge's own ``ack_fence`` (``AckRepository.record``), so a
dispatcher that lost the lease mid-send (a pause longer than the lease) still cannot
record over its successor's write.

Each region's dispatcher leases its own region's shards (the key names the region): an
item written from two regions under Global Tables would lose one of two concurrent takes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.acks.repository import LeaseLost
from reconciliation.dynamo.errors import ErrorCode, error_code, log_fields
from reconciliation.dynamo.items import from_item, values

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.stores import Store

logger = logging.getLogger(__name__)

SHARD_LEASE_PREFIX = "#ACKLEASE#"


class ShardLeaseHeld(LeaseLost):
    """Another dispatcher holds the shard's lease (or took it over from us), until
    ``until`` (epoch seconds) when known."""

    def __init__(self, message: str, *, until: int | None = None):
        super().__init__(message)
        self.until = until


class DispatcherStopping(ShardLeaseHeld):
    """This dispatcher was asked to stop (:meth:`ShardLeases.close`): it takes no lease
    and keeps none for another send, so its pass sends nothing more, as if every shard
    were held by another."""


@dataclass(frozen=True)
class ShardLease:
    """A shard's lease as its holder last wrote it."""

    shard: str
    owner: str
    fence: int
    until: int  # epoch seconds

    def left(self, now: int) -> int:
        return self.until - now


def shard_lease_key(region_name: str, shard: str) -> str:
    return f"{SHARD_LEASE_PREFIX}{region_name}#{shard}"


class ShardLeaseRepository:
    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.cases
        self.region_name = store.region_name

    def _key(self, shard: str) -> dict[str, AttributeValueTypeDef]:
        return {"case_id": {"S": shard_lease_key(self.region_name, shard)}}

    def take(
        self, shard: str, *, owner: str, held: ShardLease | None, now: int, lease_s: int
    ) -> ShardLease:
        """Take (or renew, when ``held`` is ours) ``shard``'s lease until ``now + lease_s``:
        the lease, or :class:`ShardLeaseHeld`."""
        # Free (never taken, or run out), or still the very lease we hold: our owner and
        # the fence we wrote. A take by anyone else since moved the fence, so a holder
        # that paused past its lease cannot renew over its successor.
        free = "attribute_not_exists(lease_until) OR lease_until <= :now"
        ours = "(lease_owner = :owner AND lease_fence = :held)" if held else None
        try:
            answer = self.client.update_item(
                TableName=self.table,
                Key=self._key(shard),
                UpdateExpression=(
                    "SET lease_owner = :owner, lease_until = :until,"
                    " lease_fence = if_not_exists(lease_fence, :zero) + :one"
                ),
                ConditionExpression=f"{free} OR {ours}" if ours else free,
                ExpressionAttributeValues=values(
                    owner=owner,
                    until=now + lease_s,
                    now=now,
                    zero=0,
                    one=1,
                    **({"held": held.fence} if held else {}),
                ),
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) == ErrorCode.CONDITION_FAILED:
                other = from_item(exc.response.get("Item")) or {}
                until = other.get("lease_until")
                raise ShardLeaseHeld(
                    f"{shard}: held by {other.get('lease_owner')} until {until}",
                    until=None if until is None else int(until),
                ) from exc
            raise
        return ShardLease(
            shard=shard,
            owner=owner,
            fence=int(from_item(answer["Attributes"])["lease_fence"]),
            until=now + lease_s,
        )

    def release(self, lease: ShardLease) -> None:
        """End ``lease`` now, if it is still the one we hold (else leave it alone)."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(lease.shard),
                UpdateExpression="REMOVE lease_until",
                # Ours still: a successor's lease (after ours ran out) is not ended.
                ConditionExpression="lease_owner = :owner AND lease_fence = :held",
                ExpressionAttributeValues=values(owner=lease.owner, held=lease.fence),
            )
        except ClientError as exc:
            if error_code(exc) != ErrorCode.CONDITION_FAILED:
                raise


def dispatcher_owner() -> str:
    """A name for one dispatcher: the host and process, and a random part, so two
    dispatchers (or one restarted in the same process) never pass for each other."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ShardLeases:
    """The shard leases one dispatcher holds, kept across its passes. Thread-safe: the
    dispatcher's workers check (and renew) a lease before each POST they start."""

    def __init__(
        self,
        store: Store,
        *,
        owner: str | None = None,
        lease_s: int | None = None,
        attempt_s: float | None = None,
    ):
        self.repository = ShardLeaseRepository(store)
        self.owner = owner or dispatcher_owner()
        self.lease_s = int(settings.ACK_LEASE_S if lease_s is None else lease_s)
        # The longest one POST may take: connect, then read, timeouts (and a second).
        longest = (
            settings.ACK_CONNECT_TIMEOUT_S + settings.ACK_READ_TIMEOUT_S + 1
            if attempt_s is None
            else attempt_s
        )
        if longest >= self.lease_s:
            # Misconfigured (a test's short lease, say): a POST may outlive the lease.
            logger.warning(
                "ACK_LEASE_S (%s s) is not longer than one attempt's timeouts (%g s): "
                "a dispatcher may still be sending when its shard's lease runs out",
                self.lease_s,
                longest,
            )
        # Renewed when less than this is left: half the lease, at least one attempt.
        self.renew_below = max(self.lease_s / 2, min(longest, self.lease_s))
        self.held: dict[str, ShardLease] = {}
        # Shards another dispatcher was seen holding, until when: not asked again before.
        self.others: dict[str, int] = {}
        self.closed = False
        self.lock = threading.RLock()

    def close(self) -> None:
        """Stop taking leases (the dispatcher was asked to stop): from now on
        :meth:`hold` refuses, so a send under way ends and no other starts; what is held
        stays held until :meth:`release`. Safe in a signal handler (one assignment)."""
        self.closed = True

    def hold(self, shard: str) -> ShardLease:
        """``shard``'s lease with enough left for one more attempt: kept as it is, or
        taken or renewed now (one write); :class:`ShardLeaseHeld` when another holds it,
        :class:`DispatcherStopping` once :meth:`close` was called."""
        if self.closed:
            raise DispatcherStopping(f"{shard}: this dispatcher is stopping")
        with self.lock:
            now = clock.epoch()
            held = self.held.get(shard)
            if held is not None and held.left(now) >= self.renew_below:
                return held
            try:
                lease = self.repository.take(
                    shard,
                    owner=self.owner,
                    held=held,
                    now=now,
                    lease_s=self.lease_s,
                )
            except ShardLeaseHeld as exc:
                self.held.pop(shard, None)
                if exc.until is not None:
                    self.others[shard] = exc.until
                raise
            self.held[shard] = lease
            self.others.pop(shard, None)
            return lease

    def holding(self, shard: str) -> bool:
        """Whether ``shard``'s lease is ours and still running."""
        with self.lock:
            lease = self.held.get(shard)
            return lease is not None and lease.left(clock.epoch()) > 0

    def active(self) -> list[str]:
        """The shards whose leases are ours and still running."""
        with self.lock:
            now = clock.epoch()
            return sorted(s for s, lease in self.held.items() if lease.left(now) > 0)

    def held_by_other(self, shard: str) -> bool:
        """Whether another dispatcher was seen holding ``shard`` with time left (so a
        pass does not query it, or try to take it, meanwhile)."""
        with self.lock:
            return self.others.get(shard, 0) > clock.epoch()

    def let_go(self, shard: str) -> None:
        """Give back one lease (more than our fair share): one write, so another
        dispatcher takes the shard at once."""
        with self.lock:
            lease = self.held.pop(shard, None)
            if lease is None:
                return
            try:
                self.repository.release(lease)
            except (BotoCoreError, ClientError) as exc:
                logger.warning("shard lease %s not released: %s", shard, exc, extra=log_fields(exc))

    def release(self) -> int:
        """Give up every lease held (a dispatcher that stops; one that dies leaves its
        leases to run out): one write each, so the next dispatcher need not wait. Returns
        how many were held."""
        with self.lock:
            leases = list(self.held.values())
            self.held.clear()
        count = len(leases)
        for lease in leases:
            try:
                self.repository.release(lease)
            except (BotoCoreError, ClientError) as exc:
                # It runs out on its own.
                logger.warning(
                    "shard lease %s not released: %s", lease.shard, exc, extra=log_fields(exc)
                )
        return count
