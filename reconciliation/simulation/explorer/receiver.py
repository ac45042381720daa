"""The tenant's receiver of ``explore_faults --actors 2``, in-process: passed to the
dispatcher as its ``sender`` (reconciliation/acks/dispatch.py · acks_dispatch_once), so an
acknowledgement's POST is one call point of the schedule like a DynamoDB call.

It behaves as ``webhook_sink`` does (reconciliation/simulation/webhook_sink.py): it processes each
``webhook-id`` once and counts a repeat as a duplicate. The schedule's fault at one of
its points makes it misbehave as a receiver can: refuse the connection (nothing
processed), or process and then answer 500, or process and never answer in time (the
dispatcher's read timeout: a lost answer). Signatures are not verified here: the
simulated clock puts ``webhook-timestamp`` hours away from the library's tolerance
(the sink's tests verify them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from reconciliation.acks.addresses import Target
from reconciliation.acks.models import AttemptResult
from reconciliation.simulation.ack_invariants import Receipt


class ReceiverFault(StrEnum):
    """How the receiver misbehaves at a send point the schedule names."""

    REFUSED = "refused"  # no connection: nothing processed
    ERROR_500 = "http500_after_processing"  # processed, then answered 500
    TIMEOUT = "timeout_after_processing"  # processed, the answer never came in time


RECEIVER_FAULTS = tuple(ReceiverFault)
SEND = "send"  # the label of a send point: "<hand> send#<n>"

# Names the send as a point of the schedule (yielding the turn first) and returns the
# fault the schedule puts there, if any
# (reconciliation/simulation/explorer/wire.py · HandsWire.external).
PointHook = Callable[[str], str | None]


def _no_point(_label: str) -> str | None:
    return None


class Receiver:
    """The dispatcher's ``sender``: what the endpoint heard and how it answered."""

    def __init__(self, point: PointHook = _no_point):
        self.point = point
        self.receipts: list[Receipt] = []
        self.refused = 0

    def __call__(
        self,
        target: Target,
        *,
        headers: dict[str, str],
        body: bytes,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> AttemptResult:
        fault = self.point(SEND)
        if fault == ReceiverFault.REFUSED:
            self.refused += 1
            return AttemptResult(None, "connect: ConnectionRefusedError")
        self._process(headers, json.loads(body))
        if fault == ReceiverFault.ERROR_500:
            return AttemptResult(500)
        if fault == ReceiverFault.TIMEOUT:
            return AttemptResult(None, "read timeout: the answer did not come in time")
        return AttemptResult(200)

    def _process(self, headers: dict[str, str], payload: dict[str, Any]) -> None:
        webhook_id = headers["webhook-id"]
        first = all(r.webhook_id != webhook_id for r in self.receipts)
        self.receipts.append(Receipt.of(webhook_id, payload, processed=first))

    @property
    def processed(self) -> list[str]:
        return [r.webhook_id for r in self.receipts if r.processed]

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.receipts if not r.processed)
