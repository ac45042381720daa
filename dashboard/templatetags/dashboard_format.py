"""Formatting only: ages, times, amounts, labels and pretty JSON for the staff screens."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django import template

from reconciliation import clock
from reconciliation.cases.policy import LABELS, REASON_CODES
from reconciliation.claims.repository import TOKEN_WINDOW_S

register = template.Library()

QUEUE_TITLES = {
    "STUCK_PENDING": "Stuck PENDING",
    "AMBIGUOUS_TIMEOUT": "Ambiguous timeouts",
    "CANCELLED_TRANSACTION": "Cancelled transactions",
    "TOKEN_MISMATCH": "Token mismatches",
    "ESCALATED": "Escalated",
    "OVERRIDE_REQUESTED": "Awaiting approval",
}
CASE_TYPE_WORDS = {
    "STUCK_PENDING": "Stuck PENDING claim",
    "AMBIGUOUS_TIMEOUT": "Ambiguous timeout",
    "CANCELLED_TRANSACTION": "Cancelled transaction",
    "TOKEN_MISMATCH": "Token mismatch",
}
ACTION_HELP = {
    "CONFIRMED_COMMITTED": "A consistent read finds the pledge; the claim is finalised.",
    "RETRY_COMMIT": "Re-run the commit in the background: duplicate-safe (the durable key "
    "refuses a second pledge; same token inside the 10-minute window).",
    "DUPLICATE_REJECTED_OK": "The write was a duplicate and was rightly refused; close the case.",
    "ESCALATE": "Move the case to the Escalated queue for a closer look.",
    "RELEASE_CLAIM": "Mark the claim FAILED so the client may retry with its key.",
    "VOID_PLEDGE": "Reverse the recorded pledge and subtract it from the ledger.",
    "REOPEN": "Open the resolved case again.",
}
ACTION_WORDS = {
    "case_opened": "Case opened",
    "case_assigned": "Assigned",
    "case_unassigned": "Unassigned",
    "case_escalated": "Escalated",
    "disposition_recorded": "Disposition recorded",
    "retry_commit_requested": "Commit retry requested",
    "retry_commit_succeeded": "Commit retry succeeded",
    "retry_commit_failed": "Commit retry failed",
    "override_requested": "Override requested",
    "override_approved": "Override approved",
    "override_rejected": "Override rejected",
    "override_expired": "Override request expired",
    "pledge_recorded": "Pledge recorded",
    "pledge_voided": "Pledge voided",
    "staff_created": "Staff account created",
    "staff_role_changed": "Staff role changed",
    "staff_password_set": "Staff password set",
    "mfa_enrolled": "Authenticator enrolled",
    "mfa_reset": "Second factor reset",
    "recovery_codes_issued": "Recovery codes issued",
}


def _duration(seconds: int) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _parse(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, (int, float, Decimal)):
        return datetime.fromtimestamp(int(value), UTC)
    if isinstance(value, str) and value:
        try:
            # fromisoformat reads clock.iso()'s "…Z" form (Python 3.11+) and is many
            # times faster than strptime, which matters on 50-row tables.
            at = datetime.fromisoformat(value)
        except ValueError:
            return None
        return at if at.tzinfo else at.replace(tzinfo=UTC)
    return None


@register.filter
def duration(seconds) -> str:
    """``5400`` → ``1 h 30 min``."""
    try:
        return _duration(int(seconds))
    except (TypeError, ValueError):
        return ""


@register.filter
def age(value) -> str:
    """How long ago an ISO time (or epoch seconds) was: ``3 h 12 min``."""
    at = _parse(value)
    if at is None:
        return ""
    return _duration(int((clock.now() - at).total_seconds()))


@register.filter
def until(value) -> str:
    """How long until a time: ``in 23 h 10 min`` or ``expired 5 min ago``."""
    at = _parse(value)
    if at is None:
        return ""
    left = int((at - clock.now()).total_seconds())
    return f"in {_duration(left)}" if left > 0 else f"expired {_duration(-left)} ago"


@register.filter
def utc(value) -> str:
    """``2026-11-29 23:23:48 UTC`` from an ISO string, epoch seconds or a datetime."""
    at = _parse(value)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


@register.filter
def amount(value, currency: str = "") -> str:
    """``25`` → ``25.00`` (two places, thousands separated), with the currency if given."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return str(value)
    text = f"{number:,.2f}"
    return f"{text} {currency}".strip()


@register.filter
def pretty_json(value) -> str:
    if value in (None, "", {}, []):
        return ""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@register.filter
def label(code) -> str:
    """A disposition/override code in words."""
    return LABELS.get(code, code or "")


@register.filter
def action_help(code) -> str:
    return ACTION_HELP.get(code, "")


@register.filter
def window_left(token_age_s) -> str:
    """Time left in the ClientRequestToken window for a token ``token_age_s`` old."""
    try:
        return _duration(TOKEN_WINDOW_S - int(token_age_s))
    except (TypeError, ValueError):
        return ""


@register.simple_tag
def token_window() -> str:
    return _duration(TOKEN_WINDOW_S)


@register.filter
def reason_label(code) -> str:
    return REASON_CODES.get(code, code or "")


@register.filter
def queue_title(queue) -> str:
    return QUEUE_TITLES.get(queue, queue or "")


@register.filter
def case_type(value) -> str:
    return CASE_TYPE_WORDS.get(value, value or "")


@register.filter
def action_words(action) -> str:
    return ACTION_WORDS.get(action, (action or "").replace("_", " ").capitalize())


@register.filter
def get_item(mapping, key):
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def plain(value) -> str:
    """One cell of a compared item: strings bare, everything else as compact JSON."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


@register.simple_tag
def compare_items(old: dict | None, attempted: dict | None) -> list[dict]:
    """Rows of attribute / returned old value / attempted value, marking differences, so
    the old item DynamoDB returned sits side by side with the write that was refused."""
    old = old or {}
    attempted = attempted or {}
    rows = []
    for key in sorted(set(old) | set(attempted)):
        before, after = old.get(key), attempted.get(key)
        rows.append(
            {
                "key": key,
                "old": before,
                "attempted": after,
                "differs": key in old and key in attempted and str(before) != str(after),
            }
        )
    return rows


@register.simple_tag
def stack_segments(buckets, largest) -> list[dict]:
    """Segments of one stacked bar as SVG percentages (``x``, ``width``): presentation
    only. SVG attributes rather than inline styles, which the CSP forbids."""
    try:
        largest = int(largest)
    except (TypeError, ValueError):
        return []
    segments, x = [], 0.0
    for number, (label, count) in enumerate(buckets or [], start=1):
        if largest <= 0 or not count:
            continue
        width = max(1.0, 100 * int(count) / largest)
        width = min(width, 100 - x)
        segments.append(
            {
                "n": number,
                "label": label,
                "count": count,
                "x": f"{x:.2f}%",
                "width": f"{width:.2f}%",
            }
        )
        x += width
    return segments
