"""The seam where fault injection attaches to the shared clients (docs/design.md §11).

Production code knows nothing of faults. A process where fault injection is allowed
(``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``) installs the simulation app
(``reconciliation.simulation``), whose ``ready()`` registers a :data:`SharedClientHook`
here; :func:`shared_client_hooks_run` offers every shared client, as it is built, to the
hooks registered. In a production process none is, so no shared client carries a fault
hook and no store carries faults.

What a hook returns is the :class:`CodeFaults` of that client's stores: the faults raised
in our own code rather than on the wire (the worker dying between claim and commit,
``claims.intake``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias

from django.conf import settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)


class CodeFaults(Protocol):
    """The faults a store carries for the points in our own code where they strike."""

    def crash_after_claim(self) -> None:
        """The worker 'dies' here, between claim and commit, when the plan says so."""


# Offered each shared client as it is built: attaches what it will to the client and
# answers the faults the client's stores carry, or ``None`` when it attached nothing.
SharedClientHook: TypeAlias = "Callable[[DynamoDBClient], CodeFaults | None]"

_hooks: list[SharedClientHook] = []
_hooks_lock = threading.Lock()


def shared_client_hook_register(hook: SharedClientHook) -> None:
    """Offer every shared client built from now on to ``hook`` (once, however often
    registered). Clients built before keep what they have: ``reset_clients`` rebuilds."""
    with _hooks_lock:
        if hook not in _hooks:
            _hooks.append(hook)


def shared_client_hooks_run(client: DynamoDBClient) -> CodeFaults | None:
    """Offer ``client`` to every registered hook; the faults of the last that attached."""
    if (settings.FAULT_INJECTION or "").strip() and not settings.ALLOW_FAULT_INJECTION:
        warn_ignored()
    with _hooks_lock:
        hooks = list(_hooks)
    faults: CodeFaults | None = None
    for hook in hooks:
        faults = hook(client) or faults
    return faults


def warn_ignored() -> None:
    logger.warning(
        "FAULT_INJECTION is set but ignored: it needs DJANGO_DEBUG=1 or ALLOW_FAULT_INJECTION=1"
    )
