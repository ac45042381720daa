"""``{% unread_notifications as n %}``: the navigation's badge, one indexed COUNT of the
signed-in person's unread notifications (dashboard/staff/notifications.py)."""

from __future__ import annotations

from django import template

from dashboard.staff.notifications import unread_count

register = template.Library()


@register.simple_tag(takes_context=True)
def unread_notifications(context: template.Context) -> int:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return 0
    return unread_count(user)
