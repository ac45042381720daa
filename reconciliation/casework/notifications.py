"""What supervisors are told each day: override requests waiting for their approval,
open cases past their queue's SLA, and acknowledgement endpoints the
dispatcher disabled (asked of the dashboard, which keeps them, through
:func:`reconciliation.casework.hooks.disabled_endpoints_gather`).

:func:`supervisor_digest` is a pure read over Queries, never a Scan: the per-queue
counters say which queues hold anything, and in each of those the ``open_by_queue``
index, ordered by ``opened_at``, answers "opened before now − SLA" as one bounded range
(a COUNT, and the oldest few rows). Its cost grows with the queues and the rows shown,
not with the open cases. With several regions each is read so and the results merged
(:mod:`reconciliation.casework.regions`). Sending is at the edge (``supervisor_digest_task``,
``manage.py notify_supervisors``) through :func:`digest_send`.

SLAs come from ``QUEUE_SLA_HOURS`` (``"stuck=4,ambiguous=2"``; URL slugs or queue names;
hours, fractions allowed), each queue not named taking ``QUEUE_SLA_DEFAULT_HOURS`` (4);
``reconciliation.E002`` refuses a malformed value at start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, get_connection
from django.template.defaultfilters import pluralize

from reconciliation import clock
from reconciliation.actors import Role
from reconciliation.cases.models import DRILL_TENANT
from reconciliation.cases.vocabulary import QUEUES, Override, Queue
from reconciliation.casework.hooks import DisabledEndpoint, disabled_endpoints_gather
from reconciliation.casework.regions import open_count, stores_of
from reconciliation.casework.rows import CaseRow
from reconciliation.casework.selectors import QueueFilters, queue_counters, queue_page
from reconciliation.stores import Store

DEFAULT_SLA_HOURS = Decimal(4)
# The names a person may use in QUEUE_SLA_HOURS: the URL slugs of the queue pages
# (docs/design.md §11) and the queue names themselves.
QUEUE_SLUGS: dict[str, Queue] = {
    "stuck": Queue.STUCK_PENDING,
    "ambiguous": Queue.AMBIGUOUS_TIMEOUT,
    "cancelled": Queue.CANCELLED_TRANSACTION,
    "mismatch": Queue.TOKEN_MISMATCH,
    "escalated": Queue.ESCALATED,
    "approval": Queue.OVERRIDE_REQUESTED,
}
SLUG_OF: dict[str, str] = {str(q): slug for slug, q in QUEUE_SLUGS.items()}
QUEUE_ALIASES: dict[str, Queue] = {
    **QUEUE_SLUGS,
    **{str(q): q for q in QUEUES},
    **{str(q).lower(): q for q in QUEUES},
}
# Override requests are listed on their own (with their age), so the approval queue is
# not counted a second time among the cases past SLA.
SLA_QUEUES = tuple(q for q in QUEUES if q != Queue.OVERRIDE_REQUESTED)
ROWS_SHOWN = 10


class InvalidSla(ValueError):
    pass


def sla_parse(
    value: str, default_hours: Decimal | str | int = DEFAULT_SLA_HOURS
) -> dict[Queue, Decimal]:
    """``"stuck=4,ambiguous=2"`` as hours per queue, every queue present; raises
    :class:`InvalidSla` naming what is wrong."""
    try:
        default = Decimal(str(default_hours))
    except InvalidOperation:
        raise InvalidSla(f"the default SLA {default_hours!r} is not a number of hours") from None
    if not default.is_finite() or default <= 0:
        raise InvalidSla(f"the default SLA {default_hours!r} must be more than 0 hours")
    hours: dict[Queue, Decimal] = dict.fromkeys(QUEUES, default)
    for part in (p.strip() for p in (value or "").split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        queue = QUEUE_ALIASES.get(name.strip()) or QUEUE_ALIASES.get(name.strip().lower())
        if not sep or queue is None:
            known = ", ".join(QUEUE_SLUGS)
            raise InvalidSla(f"{part!r} is not QUEUE=HOURS with a queue of: {known}")
        try:
            amount = Decimal(raw.strip())
        except InvalidOperation:
            raise InvalidSla(f"{part!r}: {raw.strip()!r} is not a number of hours") from None
        if not amount.is_finite() or amount <= 0 or amount > 24 * 365:
            raise InvalidSla(f"{part!r}: hours must be more than 0 and at most a year")
        hours[queue] = amount
    return hours


def sla_setting_problem(value: str, default_hours: object) -> str | None:
    """What is wrong with the settings (for the system check), or ``None``."""
    try:
        sla_parse(value, default_hours)  # type: ignore[arg-type]
    except InvalidSla as exc:
        return f"QUEUE_SLA_HOURS / QUEUE_SLA_DEFAULT_HOURS: {exc}"
    return None


def sla_hours() -> dict[Queue, Decimal]:
    """The configured SLA of every queue (settings are read, never assigned)."""
    return sla_parse(
        getattr(settings, "QUEUE_SLA_HOURS", ""),
        getattr(settings, "QUEUE_SLA_DEFAULT_HOURS", DEFAULT_SLA_HOURS),
    )


def sla_cutoff(hours: Decimal, now: datetime) -> str:
    """The ``queue_sort`` bound: a case opened before it is past the SLA."""
    return clock.iso(now - timedelta(seconds=float(hours * 3600)))


def is_past_sla(
    queue: Queue, opened_at: str, *, hours: Mapping[Queue, Decimal], now: datetime
) -> bool:
    if queue not in hours or queue == Queue.OVERRIDE_REQUESTED or not opened_at:
        return False
    return opened_at < sla_cutoff(hours[queue], now)


@dataclass(frozen=True)
class QueueBreach:
    """Cases of one queue open longer than its SLA: how many, and the oldest few."""

    queue: Queue
    sla_hours: Decimal
    count: int
    oldest: list[CaseRow]


@dataclass(frozen=True)
class Digest:
    at: datetime
    waiting_count: int
    waiting: list[CaseRow]
    past_sla: list[QueueBreach] = field(default_factory=list)

    @property
    def past_sla_count(self) -> int:
        return sum(b.count for b in self.past_sla)

    @property
    def is_empty(self) -> bool:
        return not self.waiting_count and not self.past_sla_count


def supervisor_digest(
    *,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    hours: Mapping[Queue, Decimal] | None = None,
    counts: Mapping[str, int] | None = None,
    rows: int = ROWS_SHOWN,
) -> Digest:
    """Override requests waiting (oldest first) and, per queue, the cases past its SLA.

    Reads, per region of ``stores`` (or ``store``'s alone), merged: the counters (one
    batch get, unless ``counts`` is given), one Query page of the approval queue, and
    per queue that holds cases one COUNT and one ``Limit=rows`` Query over
    ``queue_sort < now − SLA``."""
    regions = stores_of(store, stores)
    now = clock.now()
    hours = hours or sla_hours()
    if counts is None:
        # The drill's cases are left out here as in every list (the counters' share).
        counts = {q: c.without_drill().count for q, c in queue_counters(stores=regions).items()}
    waiting = (
        queue_page(Queue.OVERRIDE_REQUESTED, limit=rows, stores=regions).rows
        if counts.get(Queue.OVERRIDE_REQUESTED, 0) > 0
        else []
    )
    breaches = []
    for queue in SLA_QUEUES:
        if counts.get(queue, 0) <= 0:
            continue
        cutoff = sla_cutoff(hours[queue], now)
        count = open_count(regions, queue, before=cutoff, without_tenant=DRILL_TENANT)
        if not count:
            continue
        older = QueueFilters(min_age_s=int(hours[queue] * 3600))
        oldest = queue_page(queue, filters=older, limit=rows, stores=regions).rows
        breaches.append(QueueBreach(queue, hours[queue], count, oldest))
    return Digest(
        at=now,
        waiting_count=max(counts.get(Queue.OVERRIDE_REQUESTED, 0), len(waiting)),
        waiting=waiting,
        past_sla=breaches,
    )


def _hours_words(hours: Decimal) -> str:
    text = f"{hours.normalize():f}"
    return f"{text} hour" if text == "1" else f"{text} hours"


def _age(opened_at: str, now: datetime) -> str:
    seconds = int((now - clock.parse_iso(opened_at)).total_seconds())
    days, rest = divmod(max(seconds, 0), 86400)
    h, rest = divmod(rest, 3600)
    return f"{days} d {h} h" if days else f"{h} h {rest // 60} min"


def digest_message(
    digest: Digest, *, site_url: str, disabled: Sequence[DisabledEndpoint] = ()
) -> tuple[str, str]:
    """The e-mail's subject and plain-text body, linking each case and queue page; then
    the ``disabled`` endpoints, if any (tenant, URL, since when, its last answer 2xx)."""
    base = site_url.rstrip("/")
    waiting, late = digest.waiting_count, digest.past_sla_count
    subject = (
        f"Pledge reconciliation: {waiting} override request{pluralize(waiting)} waiting, "
        f"{late} case{pluralize(late)} past SLA"
    )
    if disabled:
        subject += f", {len(disabled)} webhook endpoint{pluralize(len(disabled))} disabled"
    lines = [f"As of {digest.at:%Y-%m-%d %H:%M} UTC.", ""]
    lines.append(f"Override requests waiting for approval: {digest.waiting_count}")
    for row in digest.waiting:
        override = row.override
        requester = (override.requested_by.username if override else "") or "?"
        asked_at = override.requested_at if override else ""
        lines.append(
            f"  - {Override.words(override.action if override else None)} on {row.case_id}, "
            f"by {requester}, waiting {_age(asked_at or row.opened_at, digest.at)}: "
            f"{base}/cases/{row.case_id}/"
        )
    if digest.waiting_count > len(digest.waiting):
        lines.append(
            f"  … and {digest.waiting_count - len(digest.waiting)} more: {base}/approvals/"
        )
    lines.append("")
    lines.append(f"Cases past their queue's SLA: {digest.past_sla_count}")
    for breach in digest.past_sla:
        slug = SLUG_OF[breach.queue]
        lines.append(
            f"  {breach.queue.label} (SLA {_hours_words(breach.sla_hours)}): {breach.count} — "
            f"{base}/queues/{slug}/?min_age_h={breach.sla_hours.normalize():f}"
        )
        for row in breach.oldest:
            lines.append(
                f"    - {row.case_id}, open {_age(row.opened_at, digest.at)}: "
                f"{base}/cases/{row.case_id}/"
            )
    if disabled:
        lines += ["", *_disabled_lines(disabled, now=digest.at, base=base)]
    lines += ["", f"Overview: {base}/"]
    return subject, "\n".join(lines) + "\n"


def _disabled_lines(disabled: Sequence[DisabledEndpoint], *, now: datetime, base: str) -> list[str]:
    lines = [
        f"Webhook endpoints disabled after a day of failed deliveries: {len(disabled)} "
        f"(their acknowledgements wait until each is enabled again) — {base}/acks/"
    ]
    for e in disabled[:ROWS_SHOWN]:
        last = (
            f"last answered with success {_when(e.last_success_at)}"
            if e.last_success_at
            else "never answered with success"
        )
        lines.append(
            f"  - {e.endpoint_id} of tenant {e.tenant}: {e.url}, disabled "
            f"{_when(e.disabled_at)} ({_age(clock.iso(e.disabled_at), now)} ago), {last}"
        )
    if len(disabled) > ROWS_SHOWN:
        lines.append(f"  … and {len(disabled) - ROWS_SHOWN} more: {base}/acks/")
    return lines


def _when(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def supervisor_addresses() -> list[str]:
    """Active users in the supervisor group who have an e-mail address."""
    users = get_user_model().objects.filter(is_active=True, groups__name=Role.SUPERVISOR)
    return sorted(set(users.exclude(email="").values_list("email", flat=True)))


@dataclass(frozen=True)
class DigestSent:
    recipients: list[str]
    digest: Digest
    disabled: list[DisabledEndpoint] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return self.digest.is_empty and not self.disabled

    def line(self) -> str:
        if self.is_empty:
            return (
                "notify_supervisors: nothing waiting, nothing past SLA, no endpoint "
                "disabled; no e-mail sent"
            )
        disabled = len(self.disabled)
        endpoints = f", {disabled} endpoint{pluralize(disabled)} disabled" if disabled else ""
        return (
            f"notify_supervisors: {self.digest.waiting_count} waiting, "
            f"{self.digest.past_sla_count} past SLA{endpoints}; sent to "
            f"{len(self.recipients)} supervisor{pluralize(len(self.recipients))}"
        )


def digest_send(*, store: Store | None = None, stores: Sequence[Store] | None = None) -> DigestSent:
    """Build the digest and e-mail it to every supervisor, one message each (no address
    sees another's); nothing is sent when there is nothing to report."""
    digest = supervisor_digest(stores=stores_of(store, stores))
    disabled = disabled_endpoints_gather()
    recipients = supervisor_addresses()
    sent = DigestSent(recipients, digest, disabled)
    if sent.is_empty:
        return DigestSent([], digest, disabled)
    if not recipients:
        return sent
    subject, body = digest_message(digest, site_url=settings.SITE_URL, disabled=disabled)
    with get_connection() as connection:
        messages = [
            EmailMessage(subject, body, to=[to], connection=connection) for to in recipients
        ]
        connection.send_messages(messages)
    return sent
