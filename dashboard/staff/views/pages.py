"""What the staff screens share: who may see and act, queue URL slugs, and rendering a
page or, for htmx, the named partial of the same template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers

from reconciliation.actors import STAFF_ROLES
from reconciliation.cases.policy import STAFF
from reconciliation.cases.vocabulary import CaseType, Queue

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

# Every screen admits the three staff roles; only staff and supervisors act.
VIEWING_ROLES = STAFF_ROLES
ACTING_ROLES = STAFF

# URL slugs of the queues (docs/design.md §11), in tab order.
QUEUE_SLUGS = {
    "stuck": CaseType.STUCK_PENDING,
    "ambiguous": CaseType.AMBIGUOUS_TIMEOUT,
    "cancelled": CaseType.CANCELLED_TRANSACTION,
    "mismatch": CaseType.TOKEN_MISMATCH,
    "drift": CaseType.LEDGER_DRIFT,
    "undelivered": CaseType.ACK_UNDELIVERED,
    "escalated": Queue.ESCALATED,
    "approval": Queue.OVERRIDE_REQUESTED,
}
SLUG_FOR_QUEUE: dict[str, str] = {queue: slug for slug, queue in QUEUE_SLUGS.items()}


def wants_partial(request: HttpRequest) -> bool:
    """An htmx request that swaps part of a page. A history restore (back button after
    the htmx cache was evicted) needs the whole page, although it is an htmx request."""
    htmx: HtmxDetails | None = getattr(request, "htmx", None)
    return htmx is not None and bool(htmx) and not htmx.history_restore_request


def render_page(
    request: HttpRequest,
    template: str,
    partial: str | None,
    context: Mapping[str, object],
    *,
    status: int = 200,
) -> HttpResponse:
    """The whole ``template``, or its ``partial`` for htmx. One URL answers both, so the
    response varies on ``HX-Request`` (or a browser cache could serve a fragment as a
    page after hx-push-url)."""
    name = f"{template}#{partial}" if partial and wants_partial(request) else template
    response = render(request, name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response
