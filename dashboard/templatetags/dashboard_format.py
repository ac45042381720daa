"""Formatting only: ages, times, amounts and pretty JSON for the staff screens, and each
code's words as its enum declares them (``reconciliation.codes``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django import template

from dashboard.statuses import client_answer_status
from reconciliation import clock
from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import CaseType, Disposition, Override, Queue, ReasonCode
from reconciliation.claims.models import TOKEN_WINDOW_S

register = template.Library()


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


def _action(code) -> Disposition | Override | None:
    return Disposition.of(code) or Override.of(code)


@register.filter
def label(code) -> str:
    """A disposition/override code in words."""
    action = _action(code)
    return action.label if action else str(code or "")


@register.filter
def action_help(code) -> str:
    action = _action(code)
    return action.help if action else ""


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
    return ReasonCode.words(code)


@register.filter
def queue_title(queue) -> str:
    return Queue.words(queue)


@register.filter
def case_type(value) -> str:
    return CaseType.words(value)


@register.filter
def action_words(action) -> str:
    known = AuditAction.of(action)
    return known.label if known else (action or "").replace("_", " ").capitalize()


@register.filter
def client_answer(client_outcome) -> str:
    """What the client was answered, as the API answered it: ``HTTP 202 outcome_unknown``;
    empty when it got no answer."""
    kind = (client_outcome or {}).get("error")
    status = client_answer_status(kind)
    return f"HTTP {status} {kind}" if status else ""


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
