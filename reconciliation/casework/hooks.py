"""Where casework and the edge meet without casework importing the dashboard.

What casework tells the edge after a change a person did not make in a request: an
override request that expired (the sweep's ``overrides_expire``) is announced here, so
the dashboard can tell the requester (docs/notes-and-notifications.md) without the
domain importing it. A receiver's failure is logged and never undoes or stops the
change: the expiry is already committed when it is announced.

What casework asks the edge: the webhook endpoints disabled after a day of failed
deliveries, which the dashboard keeps (its ``WebhookEndpoint`` rows), for the
supervisors' daily e-mail (:mod:`reconciliation.casework.notifications`). A receiver
that fails costs that section of the e-mail, never the e-mail."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.dispatch import Signal

if TYPE_CHECKING:
    from reconciliation.cases.models import OverrideRequest

logger = logging.getLogger(__name__)

# Sent with ``case_id`` and ``request`` (the expired :class:`OverrideRequest`).
override_expired = Signal()


def override_expired_announce(*, case_id: str, request: OverrideRequest) -> None:
    for receiver, error in override_expired.send_robust(
        sender=override_expired_announce, case_id=case_id, request=request
    ):
        if isinstance(error, Exception):
            logger.error(
                "case %s: expiry receiver %r failed: %r", case_id, receiver, error, exc_info=error
            )


@dataclass(frozen=True)
class DisabledEndpoint:
    """A tenant's acknowledgement endpoint the dispatcher disabled (docs/webhooks.md)."""

    endpoint_id: str  # ``E7``
    tenant: str
    url: str
    disabled_at: datetime
    # Since when every delivery failed; the last one answered 2xx (``None``: never).
    failing_since: datetime | None = None
    last_success_at: datetime | None = None


# Sent with no argument; each receiver answers a list of :class:`DisabledEndpoint`.
disabled_endpoints_asked = Signal()


def disabled_endpoints_gather() -> list[DisabledEndpoint]:
    """Every disabled endpoint the receivers know of, the latest disabled first."""
    found: list[DisabledEndpoint] = []
    for receiver, answer in disabled_endpoints_asked.send_robust(sender=disabled_endpoints_gather):
        if isinstance(answer, Exception):
            logger.error(
                "disabled endpoints: receiver %r failed: %r", receiver, answer, exc_info=answer
            )
            continue
        found.extend(answer)
    return sorted(found, key=lambda e: e.disabled_at, reverse=True)
