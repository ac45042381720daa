"""What casework tells the edge after a change a person did not make in a request: an
override request that expired (the sweep's ``overrides_expire``) is announced here, so
the dashboard can tell the requester (docs/notes-and-notifications.md) without the
domain importing it. A receiver's failure is logged and never undoes or stops the
change: the expiry is already committed when it is announced."""

from __future__ import annotations

import logging
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
