"""Acknowledgements sent as ``manage.py dispatch_acks`` sends them: to the endpoints each
tenant registered (the admin's rows), every host resolving to one public address."""

from __future__ import annotations

from typing import Any

from dashboard.tenancy.management.commands.dispatch_acks import endpoints_for
from reconciliation.acks.dispatch import DispatchReport, acks_dispatch_once
from tests.helpers import AS_SYSTEM

PUBLIC_ADDRESS = "93.184.216.34"


def dispatch_acks(sender, **options: Any) -> DispatchReport:
    """One dispatch pass on the first region's tables, each attempt answered by
    ``sender``; ``options`` as :func:`acks_dispatch_once` takes them (``on_attempt``…)."""
    return acks_dispatch_once(
        AS_SYSTEM.store,
        endpoints_for=endpoints_for,
        resolve=lambda host, port: [PUBLIC_ADDRESS],
        sender=sender,
        **options,
    )
