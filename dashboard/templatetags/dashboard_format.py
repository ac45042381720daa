"""Formatting only: ages, times, amounts and pretty JSON for the staff screens, and each
code's words as its enum declares them (``reconciliation.codes``).

Times: ``when`` (and ``utc``, the same) renders an instant as a ``<time>`` in the reader's
zone (activated per request from their profile), ``30 Nov, 00:23 CET``, with the exact UTC
instant in its ``title`` and ``datetime``; ``when_exact`` adds the UTC instant as text, for
detail pages; ``exact`` is the UTC instant as plain text, for attributes; ``ago`` is an age
in a ``<time>`` with the same title. Codes: ``words`` (alias ``label``) is any code's label,
``explain`` its one-line help; an unknown code is shown as given."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TypedDict

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from dashboard.lib.statuses import client_answer_status
from dashboard.staff.audit_changes import event_changes
from reconciliation import clock
from reconciliation.actors import Role
from reconciliation.audit.models import AuditAction
from reconciliation.cases.models import ClientOutcome
from reconciliation.cases.vocabulary import (
    CaseState,
    CaseType,
    Disposition,
    ErrorKind,
    Override,
    Queue,
    ReasonCode,
    RetryStatus,
)
from reconciliation.claims.models import TOKEN_WINDOW_S, ClaimStatus, PledgeStatus
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.request_log import IntakeRequest
from reconciliation.claims.versions import VERSIONS
from reconciliation.codes import Code, find_code
from reconciliation.dynamo.cancellation import Branch, CancellationCode
from reconciliation.dynamo.errors import ErrorCode

if TYPE_CHECKING:
    from _typeshed import ConvertibleToInt

    from reconciliation.audit.search import AuditRow

# Which enum speaks first for a code several name (a case state and a queue share
# OVERRIDE_REQUESTED; a case type and a queue share STUCK_PENDING): the generic filter
# prefers the thing a row *is* (type, state) over where it sits (queue).
WORDS_ORDER: tuple[type[Code], ...] = (
    Disposition,
    Override,
    CaseType,
    CaseState,
    ReasonCode,
    AuditAction,
    ClaimStatus,
    PledgeStatus,
    RetryStatus,
    ErrorKind,
    OutcomeKind,
    CancellationCode,
    ErrorCode,
    Branch,
    Queue,
)

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


def _parse(value: object) -> datetime | None:
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
def duration(seconds: ConvertibleToInt) -> str:
    """``5400`` → ``1 h 30 min``."""
    try:
        return _duration(int(seconds))
    except (TypeError, ValueError):
        return ""


@register.filter
def pledge_version(name: str | None) -> SafeString:
    """A stored ``Pledge-Version`` as its date in ``<code>``, its rules in the title; none
    (stored before versions existed) reads as the first version, and says so."""
    version = VERSIONS.get(str(name)) if name else VERSIONS.first
    if version is None:
        return format_html('<code>{}</code> <span class="muted">(not a known version)</span>', name)
    code = format_html('<code title="{}">{}</code>', version.summary, version.name)
    if name:
        return code
    return format_html('{} <span class="muted">(stored before versions: the first)</span>', code)


@register.filter
def age(value: object) -> str:
    """How long ago an ISO time (or epoch seconds) was: ``3 h 12 min``."""
    at = _parse(value)
    if at is None:
        return ""
    return _duration(int((clock.now() - at).total_seconds()))


@register.filter
def until(value: object) -> str:
    """How long until a time: ``in 23 h 10 min`` or ``expired 5 min ago``."""
    at = _parse(value)
    if at is None:
        return ""
    left = int((at - clock.now()).total_seconds())
    return f"in {_duration(left)}" if left > 0 else f"expired {_duration(-left)} ago"


def _exact(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _zone_abbreviation(local: datetime) -> str:
    name = local.tzname() or ""
    # Zones without a letter abbreviation report an offset ("+0530", "-03").
    return f"UTC{name}" if name[:1] in "+-" and name else name


def _local(at: datetime, *, seconds: bool = False) -> str:
    """``30 Nov, 00:23 CET`` in the active zone; the year when it is not this year."""
    local = timezone.localtime(at)
    year = "" if local.year == timezone.localtime(clock.now()).year else f" {local.year}"
    clock_time = local.strftime("%H:%M:%S" if seconds else "%H:%M")
    return f"{local.day} {local:%b}{year}, {clock_time} {_zone_abbreviation(local)}"


def _time_element(at: datetime, text: str) -> SafeString:
    # The attribute keeps the stored precision (events within one second stay ordered
    # for anything that reads the page); people read the text and the title.
    iso = at.astimezone(UTC).isoformat(timespec="auto").replace("+00:00", "Z")
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, _exact(at), text)


def _is_utc_active() -> bool:
    return timezone.get_current_timezone_name() in ("UTC", "Etc/UTC")


@register.filter
def when(value: object) -> str:
    """An instant (ISO string, epoch seconds or datetime) in the reader's zone, as a
    ``<time>`` whose title is the exact UTC instant; empty for anything else."""
    at = _parse(value)
    return _time_element(at, _local(at)) if at else ""


utc = register.filter("utc", when)


@register.filter
def when_exact(value: object) -> str:
    """For detail pages: the local time and, beside it, the exact UTC instant (once,
    when the reader's zone is UTC itself)."""
    at = _parse(value)
    if at is None:
        return ""
    if _is_utc_active():
        return _time_element(at, _local(at, seconds=True))
    return format_html(
        '{} <span class="exact">({})</span>', _time_element(at, _local(at)), _exact(at)
    )


@register.filter
def exact(value: object) -> str:
    """``2026-11-29 23:23:48 UTC``: the exact UTC instant as plain text (attributes)."""
    at = _parse(value)
    return _exact(at) if at else ""


@register.filter
def ago(value: object) -> str:
    """``3 h 12 min ago`` in a ``<time>`` whose title is the exact UTC instant."""
    at = _parse(value)
    if at is None:
        return ""
    return _time_element(at, f"{_duration(int((clock.now() - at).total_seconds()))} ago")


@register.simple_tag
def now_local() -> str:
    return when(clock.now())


@register.simple_tag
def current_zone() -> str:
    return str(timezone.get_current_timezone()).replace("_", " ")


@register.filter
def amount(value: object, currency: str = "") -> str:
    """``25`` → ``25.00`` (two places, thousands separated), with the currency if given."""
    try:
        number = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return str(value)
    text = f"{number:,.2f}"
    return f"{text} {currency}".strip()


@register.filter
def pretty_json(value: object) -> str:
    if value in (None, "", {}, []):
        return ""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _action(code: object) -> Disposition | Override | None:
    return Disposition.of(code) or Override.of(code)


def _code(value: object) -> Code | None:
    if value is None or value == "":
        return None
    for enum in WORDS_ORDER:
        member = enum.of(value)
        if member is not None:
            return member
    return find_code(value)


@register.filter
def words(code: object) -> str:
    """Any stored code in words (``OVERRIDE_REQUESTED`` → ``Override requested``); an
    unknown code as given, and nothing for nothing."""
    member = _code(code)
    return member.label if member is not None else str(code if code is not None else "")


label = register.filter("label", words)


@register.filter
def explain(code: object) -> str:
    """A code's one-line explanation, or nothing."""
    member = _code(code)
    return member.help if member is not None else ""


@register.filter
def code_words(code: object) -> str:
    """A code in words, with its explanation (or the code itself) on hover."""
    member = _code(code)
    if member is None:
        return str(code if code is not None else "")
    return format_html('<span title="{}">{}</span>', member.help or str(member), member.label)


@register.filter
def retry_words(status: object) -> str:
    member = RetryStatus.of(status) or OutcomeKind.of(status)
    return member.label if member is not None else str(status or "")


@register.filter
def action_help(code: object) -> str:
    action = _action(code)
    return action.help if action else ""


@register.filter
def window_left(token_age_s: ConvertibleToInt) -> str:
    """Time left in the ClientRequestToken window for a token ``token_age_s`` old."""
    try:
        return _duration(TOKEN_WINDOW_S - int(token_age_s))
    except (TypeError, ValueError):
        return ""


@register.simple_tag
def token_window() -> str:
    return _duration(TOKEN_WINDOW_S)


def _words_filter(vocabulary: type[Code]) -> Callable[[object], str]:
    def words(value: object) -> str:
        return vocabulary.words(value)

    return words


# A value of the vocabulary in its words (each enum's label table): the filter's name in
# the templates, and whose words it gives.
WORDS_FILTERS: dict[str, type[Code]] = {
    "state_words": CaseState,
    "role_words": Role,
    "reason_label": ReasonCode,
    "queue_title": Queue,
    "case_type": CaseType,
}
for _name, _vocabulary in WORDS_FILTERS.items():
    register.filter(_name, _words_filter(_vocabulary))


@register.filter
def action_words(action: str | None) -> str:
    known = AuditAction.of(action)
    return known.label if known else (action or "").replace("_", " ").capitalize()


@register.filter
def client_answer(client_outcome: ClientOutcome | None) -> str:
    """What the client was answered (a case's ``client_outcome``): ``HTTP 202: outcome
    unknown``, the API's own error code on hover; empty when it got no answer."""
    kind = client_outcome.error if client_outcome else None
    status = client_answer_status(kind)
    if not status:
        return ""
    member = OutcomeKind.of(kind)
    text = member.label.lower() if member is not None else str(kind).replace("_", " ")
    return format_html('HTTP {}: <span title="error code {}">{}</span>', status, kind, text)


@register.filter
def answer_status(entry: IntakeRequest) -> int | None:
    """The HTTP status of an intake request log entry: the one the edge stored, or, on
    the entry a pledge's commit wrote (no status is known below the edge), the API's
    answer to its outcome (``created``: 201)."""
    return entry.status if entry.status is not None else client_answer_status(entry.outcome)


@register.filter
def get_item(mapping: object, key: Hashable) -> object:
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def plain(value: object) -> str:
    """One cell of a compared item: strings bare, everything else as compact JSON."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


class ComparedItem(TypedDict):
    """One row of :func:`compare_items`."""

    key: str
    old: object
    attempted: object
    differs: bool


@register.simple_tag
def compare_items(
    old: dict[str, Any] | None, attempted: dict[str, Any] | None
) -> list[ComparedItem]:
    """Rows of attribute / returned old value / attempted value, marking differences, so
    the old item DynamoDB returned sits side by side with the write that was refused."""
    old = old or {}
    attempted = attempted or {}
    rows: list[ComparedItem] = []
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


class Segment(TypedDict):
    """One segment of :func:`stack_segments`' bar."""

    n: int
    label: str
    count: int
    x: str
    width: str


@register.simple_tag
def stack_segments(
    buckets: Iterable[tuple[str, int]] | None, largest: ConvertibleToInt
) -> list[Segment]:
    """Segments of one stacked bar as SVG percentages (``x``, ``width``): presentation
    only. SVG attributes rather than inline styles, which the CSP forbids."""
    try:
        largest = int(largest)
    except (TypeError, ValueError):
        return []
    segments: list[Segment] = []
    x = 0.0
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


# --- keys as people read them --------------------------------------------------------

# The audit streams' kinds (reconciliation/audit): a stream is ``KIND#name``.
STREAM_KINDS = {
    "CASE#": "Case",
    "PLEDGE#": "Pledge",
    "STAFF#": "Staff account",
    "TENANT#": "Tenant",
    "EXPORT#": "Export",
}


@register.filter
def intent(value: object) -> str:
    """An intent id as people read it: its tenant, then the client's key exactly as sent
    (in ``<code>``), never the stored ``tenant#key``. Anything else (a fund ledger's
    subject) is shown as it is."""
    tenant, sep, key = str(value or "").partition("#")
    if not sep:
        return str(value or "")
    return format_html(
        '<span class="intent"><span class="tenant">{}</span> <code>{}</code></span>', tenant, key
    )


@register.filter
def intent_cut(value: object) -> str:
    """An intent id in a list's column: as :func:`intent`, the key in a box of its own
    that the list may cut short with an ellipsis (app.css), its whole value in the title
    (hover) and still in the text (a copy takes all of it)."""
    tenant, sep, key = str(value or "").partition("#")
    if not sep:
        return format_html('<span class="cut" title="{}">{}</span>', value or "", value or "")
    return format_html(
        '<span class="intent cut-intent"><span class="tenant">{}</span> '
        '<code class="cut" title="{}">{}</code></span>',
        tenant,
        key,
        key,
    )


@register.filter
def cut(value: object) -> str:
    """An id (a donor ref, a client's key, a webhook id) on one line that a list may cut
    short with an ellipsis (app.css); its whole value in the title and in the copy."""
    text = str(value or "")
    return format_html('<span class="cut" title="{}">{}</span>', text, text)


# After these a person's username may break onto the next line: it is read as words
# ("christopher.vandenberghe-okafor"), never cut short.
_NAME_BREAKS = re.compile(r"([._@:-])(?=.)")


@register.filter
def name_breaks(value: object) -> str:
    """A username that may wrap after its dots, hyphens, underscores, colons and at-signs
    (a ``<wbr>`` after each): a long name takes two or three short lines instead of
    widening its column, and is never cut short."""
    parts = _NAME_BREAKS.sub(r"\1<wbr>", str(escape(str(value or ""))))
    return mark_safe(f'<span class="name">{parts}</span>')  # noqa: S308


@register.filter
def stream_words(stream: object) -> str:
    """An audit stream as people read it: ``Case C-…``, ``Pledge acme order-1``,
    ``Staff account ada``; the system's own stream is "System"."""
    name = str(stream or "")
    if name == "SYSTEM":
        return "System"
    for prefix, kind in STREAM_KINDS.items():
        if name.startswith(prefix):
            rest = name.removeprefix(prefix)
            if prefix == "PLEDGE#":
                region, _, rest = (
                    rest[1:].partition("#") if rest.startswith("@") else ("", "", rest)
                )
                where = format_html(' <span class="muted">in {}</span>', region) if region else ""
                return format_html("{} {}{}", kind, intent(rest), where)
            return format_html("{} <code>{}</code>", kind, rest)
    return format_html("<code>{}</code>", name)


EXPORT_FORMATS = {"csv": "CSV", "jsonl": "JSON Lines"}


@register.filter
def export_format(fmt: object) -> str:
    """An audit export's file format by its name: CSV, JSON Lines."""
    return EXPORT_FORMATS.get(str(fmt), str(fmt))


@register.filter
def export_filters(values: Mapping[str, str] | None) -> list[str]:
    """An export's stored filters (``AuditFilters.as_dict``) as a person says them: the
    days it covers, then each other filter by its label."""
    values = dict(values or {})
    lines = []
    since, until = _parse(values.pop("since", "")), _parse(values.pop("until", ""))
    if since and until:
        lines.append(f"From {since.date().isoformat()} to {until.date().isoformat()} (UTC)")
    names = {
        "actor": "Actor",
        "action": "Action",
        "case_id": "Case",
        "intent_id": "Intent",
        "intent_tenants": "The key searched under the tenants",
        "performed_by": "Only events by",
    }
    for name, label in names.items():
        if values.get(name):
            shown = action_words(values[name]) if name == "action" else values[name]
            if name == "intent_tenants":
                shown = ", ".join(shown.split(","))
            lines.append(f"{label}: {shown}")
    return lines


@register.filter
def audit_changes(row: AuditRow) -> list[str]:
    """What an audit page row's event changed, a line each ("Role: Finance staff →
    Supervisor"): ``dashboard.staff.audit_changes``, from the event as stored."""
    event = {
        "action": row.action,
        "case_id": row.case_id,
        "before": row.before,
        "after": row.after,
        "detail": row.detail,
    }
    return [change.line for change in event_changes(event)]
