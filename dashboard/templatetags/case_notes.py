"""``event|note_html``: a note's text as the timeline shows it: escaped, line breaks
kept, and the ``@name`` of each colleague it notified marked (other names stay plain)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from dashboard.staff.notifications import MENTION_RE
from reconciliation.casework.notes import note_of

register = template.Library()


@register.filter
def note_html(event: dict[str, Any]) -> SafeString:
    text = note_of(event).replace("\r\n", "\n")
    # Matched as the note was: a name in any letter case (``@Supervisor``) told the account.
    notified = {name.casefold() for name in (event.get("detail") or {}).get("mentions") or []}
    parts: list[str] = []
    at = 0
    for match in MENTION_RE.finditer(text):
        if match.group(1).casefold() not in notified:
            continue
        parts.append(escape(text[at : match.start()]))
        parts.append(f'<strong class="mention">{escape(match.group(0))}</strong>')
        at = match.end()
    parts.append(escape(text[at:]))
    return mark_safe("".join(parts).replace("\n", "<br>"))  # noqa: S308 - every part escaped
