"""One attempt of a delivery: the endpoint's address checked again, the body signed and
sent; then the delivery as it stands after it: delivered, due again after its backoff,
or given up after the last attempt (docs/webhooks.md)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from django.conf import settings

from reconciliation import clock
from reconciliation.acks.addresses import Resolver, UrlRefused, url_check
from reconciliation.acks.models import AttemptResult, Delivery, DeliveryStatus, Endpoint
from reconciliation.acks.schedule import retry_delay_s
from reconciliation.acks.send import signed_headers

Sender = Callable[..., AttemptResult]


def attempt_make(
    endpoint: Endpoint, message_id: str, payload: bytes, *, resolve: Resolver, sender: Sender
) -> AttemptResult:
    """POST ``payload`` to ``endpoint``, signed, unless its address is refused now."""
    try:
        # Checked again now: the name may resolve elsewhere than at registration.
        target = url_check(
            endpoint.url, allow_loopback=settings.WEBHOOK_ALLOW_LOOPBACK, resolve=resolve
        )
    except UrlRefused as exc:
        return AttemptResult(None, f"refused: {exc}")
    at: datetime = clock.now()
    headers = signed_headers(
        secret=endpoint.secret,
        previous_secret=endpoint.previous_secret_at(at),
        event_id=message_id,
        at=at,
        body=payload,
    )
    result = sender(
        target,
        headers=headers,
        body=payload,
        connect_timeout_s=settings.ACK_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.ACK_READ_TIMEOUT_S,
    )
    return replace(result, signature=headers["webhook-signature"])


def delivery_after(delivery: Delivery, result: AttemptResult, *, rng: random.Random) -> Delivery:
    """``delivery`` once ``result`` is known: delivered, due again, or given up."""
    attempts = delivery.attempts + 1
    done = replace(
        delivery,
        attempts=attempts,
        last_code=result.code,
        last_error=result.error[:200],
        last_at=clock.iso(clock.now()),
        last_signature=result.signature,
    )
    if result.ok:
        return replace(done, status=DeliveryStatus.DELIVERED, next_at=0)
    delay = retry_delay_s(attempts, rng, scale=settings.ACK_RETRY_SCALE)
    if delay is None:
        return replace(done, status=DeliveryStatus.GAVE_UP, next_at=0)
    return replace(done, next_at=clock.epoch() + delay)
