"""The signed-in person's notifications (``/notifications/``): newest first, each
linking to its case; opening one marks it read, "Mark all read" marks the rest. Every
query is narrowed to the requester's own rows, so another person's notification is a
404 here, never read nor marked (docs/notes-and-notifications.md)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe

from dashboard.auth import StaffRequest, role_required
from dashboard.staff.models import Notification, NotificationQuerySet
from dashboard.staff.views.pages import VIEWING_ROLES, render_page, wants_partial

SHOWN = 100


def _mine(request: StaffRequest) -> NotificationQuerySet:
    return Notification.objects.filter(recipient_id=request.user.pk)


def _list(request: StaffRequest) -> HttpResponse:
    rows = list(_mine(request).order_by("-created_at", "-id")[:SHOWN])
    context = {
        "notifications": rows,
        "unread": sum(n.is_unread for n in rows),
        "oob_messages": wants_partial(request),
    }
    return render_page(request, "notifications/list.html", "list", context)


@require_safe
@role_required(*VIEWING_ROLES)
def notifications_view(request: StaffRequest) -> HttpResponse:
    return _list(request)


@require_safe
@role_required(*VIEWING_ROLES)
def notification_open(request: StaffRequest, notification_id: int) -> HttpResponse:
    """Mark one of the requester's notifications read and go to its case."""
    notification = _mine(request).filter(pk=notification_id).first()
    if notification is None:
        raise Http404("No such notification")
    if notification.is_unread:
        _mine(request).filter(pk=notification.pk, read_at__isnull=True).update(
            read_at=timezone.now()
        )
    try:
        return redirect(reverse("case", kwargs={"case_id": notification.case_id}))
    except NoReverseMatch:
        # A row written by hand with an id no case can have: back to the list, not a 500.
        messages.error(request, f"{notification.case_id} is not a case id.")
        return redirect("notifications")


@require_POST
@role_required(*VIEWING_ROLES)
def notifications_read_all(request: StaffRequest) -> HttpResponse:
    marked = _mine(request).unread().update(read_at=timezone.now())
    messages.success(request, f"{marked} notification{'' if marked == 1 else 's'} marked read.")
    if wants_partial(request):
        return _list(request)
    return redirect("notifications")
