"""Acknowledgement webhooks (docs/webhooks.md): the vocabulary, the endpoint a tenant
registers, and the state of one event's deliveries as stored on the pledge item."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from reconciliation.codes import Code

if TYPE_CHECKING:
    from reconciliation.claims.models import Pledge

SECRET_PREFIX = "whsec_"
# The event payload's own version (``version`` beside ``type``), bumped on any change of
# its fields, so a receiver can tell one shape from the next.
PAYLOAD_VERSION = 1


class EventType(Code):
    PLEDGE_RECORDED = (
        "pledge.recorded",
        "Pledge recorded",
        "Sent once the pledge is recorded: the tenant's systems may acknowledge it.",
    )
    PLEDGE_VOIDED = (
        "pledge.voided",
        "Pledge voided",
        "Sent once an approved override voided the recorded pledge.",
    )


# Events an endpoint receives when registered without ``--events``.
DEFAULT_EVENTS = (EventType.PLEDGE_RECORDED, EventType.PLEDGE_VOIDED)
# Requests one dispatcher has open to one endpoint at most, unless the endpoint says
# otherwise: enough to keep a healthy receiver busy, few enough that one that hangs holds
# only this many of the dispatcher's workers (reconciliation/acks/gates.py).
DEFAULT_MAX_IN_FLIGHT = 8


class BreakerState(Code):
    """An endpoint's circuit breaker (reconciliation/acks/gates.py)."""

    CLOSED = "CLOSED", "Sending", "Deliveries go out as they come due."
    OPEN = (
        "OPEN",
        "Paused",
        "Its last attempts all failed: deliveries wait, spending no attempt, until a trial.",
    )
    HALF_OPEN = (
        "HALF_OPEN",
        "Trying",
        "One trial delivery is under way: its answer opens or closes the breaker.",
    )


class DeliveryStatus(Code):
    # Not yet answered 2xx; attempts left.
    PENDING = "PENDING", "Waiting", "Not yet answered with success: sent again at its next attempt."
    # Answered 2xx once: never sent again.
    DELIVERED = "DELIVERED", "Delivered", "The endpoint answered with success; not sent again."
    # The last attempt failed: an ACK_UNDELIVERED case (acks/undelivered.py).
    GAVE_UP = "GAVE_UP", "Given up", "Every attempt of the retry schedule failed; not sent again."


def secret_new() -> str:
    """A signing secret in the Standard Webhooks form: ``whsec_`` + base64 of 24 bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def event_id(intent_id: str, event_type: str) -> str:
    """The ``webhook-id`` of an event: stable per (pledge, event type), so every attempt
    and every redelivery carries the same id and a receiver deduplicates on it."""
    digest = hashlib.sha256(f"{intent_id}\n{event_type}".encode()).hexdigest()[:32]
    return f"msg_{digest}"


@dataclass(frozen=True)
class Endpoint:
    """A tenant's registered receiver (the Django model ``WebhookEndpoint``, as plain data)."""

    endpoint_id: str
    tenant: str
    url: str
    secret: str
    events: tuple[str, ...] = DEFAULT_EVENTS
    enabled: bool = True
    # The secret the last rotation replaced, valid until ``previous_secret_until``.
    previous_secret: str = ""
    previous_secret_until: datetime | None = None
    # At most this many requests open to it at once, per dispatcher.
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    # Deliveries a second at most, per dispatcher (``None``: as fast as it answers).
    rate_per_s: float | None = None
    # A circuit breaker opened by some dispatcher (its row's ``breaker_until``): every
    # dispatcher leaves it alone until then.
    paused_until: datetime | None = None

    def previous_secret_at(self, at: datetime) -> str | None:
        """The previous secret while it is still valid at ``at`` (deliveries are then
        signed with it too), else ``None``."""
        if not self.previous_secret or self.previous_secret_until is None:
            return None
        return self.previous_secret if at < self.previous_secret_until else None

    def wants(self, event_type: str) -> bool:
        """Subscribed to ``event_type``; a disabled endpoint still is (its deliveries
        wait, and go out when it is enabled again)."""
        return event_type in self.events


def delivery_key(endpoint_id: str, event_type: str) -> str:
    """A delivery's key in the pledge item's ``acks`` map: one per endpoint and event."""
    return f"{endpoint_id}/{event_type}"


@dataclass(frozen=True)
class Delivery:
    """One event to one endpoint: its attempts so far and what the last one heard."""

    endpoint_id: str
    url: str
    event_type: str = EventType.PLEDGE_RECORDED
    status: DeliveryStatus = DeliveryStatus.PENDING
    attempts: int = 0
    last_code: int | None = None
    last_error: str = ""
    last_at: str = ""
    next_at: int = 0  # epoch seconds of the next attempt, while PENDING
    # The last attempt's ``webhook-signature`` header (a signature, never the secret).
    last_signature: str = ""

    @property
    def settled(self) -> bool:
        return self.status != DeliveryStatus.PENDING

    @property
    def key(self) -> str:
        return delivery_key(self.endpoint_id, self.event_type)

    def to_map(self) -> dict[str, Any]:
        return {
            "endpoint_id": self.endpoint_id,
            "event_type": str(self.event_type),
            "url": self.url,
            "status": str(self.status),
            "attempts": self.attempts,
            "last_code": self.last_code,
            "last_error": self.last_error,
            "last_at": self.last_at,
            "next_at": self.next_at,
            "last_signature": self.last_signature,
        }

    @classmethod
    def from_map(cls, data: dict[str, Any]) -> Delivery:
        return cls(
            endpoint_id=str(data["endpoint_id"]),
            url=str(data.get("url", "")),
            event_type=str(data.get("event_type", EventType.PLEDGE_RECORDED)),
            status=DeliveryStatus(data.get("status", DeliveryStatus.PENDING)),
            attempts=int(data.get("attempts", 0)),
            last_code=None if data.get("last_code") is None else int(data["last_code"]),
            last_error=str(data.get("last_error", "")),
            last_at=str(data.get("last_at", "")),
            next_at=int(data.get("next_at", 0)),
            last_signature=str(data.get("last_signature", "")),
        )


@dataclass(frozen=True)
class AckState:
    """The acknowledgement part of a pledge item, read consistently: whether it is due,
    its fence (``ack_fence``, counting the writes of its deliveries: what a record is
    conditioned on), and each endpoint's delivery."""

    intent_id: str
    tenant: str
    due_at: int | None
    fence: int
    pledge: Pledge
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    case_id: str | None = None

    @property
    def due(self) -> bool:
        return self.due_at is not None


@dataclass(frozen=True)
class AttemptResult:
    """What one POST heard: a status code, or no answer (``error`` says why)."""

    code: int | None
    error: str = ""
    signature: str = ""  # the ``webhook-signature`` header sent, when one was
    duration_ms: float = 0.0  # from the connection's start to the answer, or to the error

    @property
    def ok(self) -> bool:
        return self.code is not None and 200 <= self.code < 300


@dataclass(frozen=True)
class Attempt:
    """One POST of one pledge's event to one endpoint, as the dispatcher tells the edge
    of it once it is made (the endpoint's counters and its attempt log)."""

    endpoint: Endpoint
    intent_id: str
    event_type: EventType
    webhook_id: str
    at: datetime
    result: AttemptResult
