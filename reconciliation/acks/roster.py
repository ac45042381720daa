"""Which dispatchers are alive, so each takes a fair share of the shard leases
(docs/webhooks.md, "Several dispatchers").

One item per region in the cases table, ``#ACKROSTER#<region>`` (beside the shard leases;
readers of cases skip keys starting ``#``), holds a map from each dispatcher's name to the
epoch second its heartbeat runs out. A dispatcher writes its own entry only (one
UpdateItem of its own map key: two dispatchers beating at once never lose each other's),
again when less than half of its time is left, and reads the item again every few
seconds. It then holds at most ``ceil(shards / live dispatchers)`` leases, and lets go
of the extras once nothing of theirs is in flight (reconciliation/acks/dispatch.py).

The roster is only about sharing the work. Exclusion is the shard lease's, and a record's
correctness the pledge's fence: a roster that is wrong for a while (a dispatcher dead but
not yet run out, two that have not yet seen each other) makes a share uneven, never a
pledge sent twice at once or lost. A dead dispatcher's entry runs out with its leases
(both last ``ACK_LEASE_S``), so the survivors take its shards as soon as they are free.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from reconciliation import clock
from reconciliation.dynamo.errors import ErrorCode, error_code, log_fields
from reconciliation.dynamo.items import from_item, values

if TYPE_CHECKING:
    from reconciliation.stores import Store

ROSTER_PREFIX = "#ACKROSTER#"
# How often the roster is read again: how soon a dispatcher that starts or stops is seen.
READ_EVERY_S = 3.0

logger = logging.getLogger(__name__)


def fair_share(shards: int, live: int) -> int:
    """The leases one of ``live`` dispatchers may hold: every shard is someone's."""
    return math.ceil(shards / max(1, live))


class Roster:
    """One dispatcher's heartbeat in its region's roster, and what it last read of it."""

    def __init__(self, store: Store, *, owner: str, ttl_s: int):
        self.client = store.client
        self.table = store.tables.cases
        self.key = {"case_id": {"S": f"{ROSTER_PREFIX}{store.region_name}"}}
        self.owner = owner
        self.ttl_s = ttl_s
        self.lock = threading.Lock()
        self.until = 0  # our heartbeat, as last written
        self.read_at = -math.inf
        self.live = 1  # ourselves, at least

    def live_count(self) -> int:
        """Dispatchers alive (ourselves included): the heartbeat written when less than
        half of it is left, the roster read again every ``READ_EVERY_S``. A roster that
        cannot be written or read keeps the last count (the share only)."""
        now = clock.epoch()
        with self.lock:
            try:
                if self.until - now < self.ttl_s / 2:
                    self._beat(now)
                if clock.now().timestamp() - self.read_at >= READ_EVERY_S:
                    self._read(now)
            except (BotoCoreError, ClientError) as exc:
                logger.warning("dispatcher roster not kept: %s", exc, extra=log_fields(exc))
            return self.live

    def _beat(self, now: int) -> None:
        until = now + self.ttl_s
        try:
            self._set_own(until)
        except ClientError as exc:
            # The item (or its map) is not there yet: made with our entry, once.
            if error_code(exc) != ErrorCode.VALIDATION:
                raise
            self._create(until)
        self.until = until

    def _set_own(self, until: int) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=self.key,
            UpdateExpression="SET members.#me = :until",
            ExpressionAttributeNames={"#me": self.owner},
            ExpressionAttributeValues=values(until=until),
        )

    def _create(self, until: int) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self.key,
                UpdateExpression="SET members = :members",
                # Only where no map is: another's first beat may have made it meanwhile.
                ConditionExpression="attribute_not_exists(members)",
                ExpressionAttributeValues=values(members={self.owner: until}),
            )
        except ClientError as exc:
            if error_code(exc) != ErrorCode.CONDITION_FAILED:
                raise
            self._set_own(until)

    def _read(self, now: int) -> None:
        item = self.client.get_item(TableName=self.table, Key=self.key, ConsistentRead=True).get(
            "Item"
        )
        members = (from_item(item) or {}).get("members") or {}
        alive = {name for name, until in members.items() if int(until) > now}
        self.live = len(alive | {self.owner})
        self.read_at = clock.now().timestamp()
        for name, until in members.items():
            if name != self.owner and int(until) <= now - self.ttl_s:
                self._forget(name, int(until))

    def _forget(self, name: str, until: int) -> None:
        """Remove a dispatcher run out for a whole heartbeat (it died): only if its entry
        is still the one read, so one that came back meanwhile keeps its new beat."""
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self.key,
                UpdateExpression="REMOVE members.#gone",
                ConditionExpression="members.#gone = :until",
                ExpressionAttributeNames={"#gone": name},
                ExpressionAttributeValues=values(until=until),
            )
        except ClientError as exc:
            if error_code(exc) != ErrorCode.CONDITION_FAILED:
                raise

    def leave(self) -> None:
        """Take our entry out (a dispatcher that stops), so the others take our shards'
        share at their next read instead of after our heartbeat runs out."""
        with self.lock:
            try:
                self.client.update_item(
                    TableName=self.table,
                    Key=self.key,
                    UpdateExpression="REMOVE members.#me",
                    ExpressionAttributeNames={"#me": self.owner},
                )
            except (BotoCoreError, ClientError) as exc:
                logger.warning("dispatcher roster not left: %s", exc, extra=log_fields(exc))
            self.until = 0
