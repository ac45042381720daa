"""Who calls the API, in Django's database: tenants, their tokens, registered funds and
acknowledgement endpoints, read by the API, the staff pages and the operators' commands.
Domain data lives in DynamoDB."""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import MAX_PREC, Context, Decimal
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import DatabaseError, connection, models, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from reconciliation import clock
from reconciliation.acks import models as ack_models
from reconciliation.claims import funds as fund_rules

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "plg_"
# Live (neither revoked nor expired) tokens a tenant may hold at once: the old one and its
# replacement during a rotation (docs/security.md).
MAX_LIVE_TOKENS = 2
# ``last_used_at`` is written at most this often per token: not a database write per request.
LAST_USED_EVERY = timedelta(minutes=1)


class TokenRefusal(StrEnum):
    """Why a bearer token was not accepted: the 401's ``error`` code."""

    UNKNOWN = "token_unknown"
    REVOKED = "token_revoked"
    EXPIRED = "token_expired"


@dataclass(frozen=True)
class Caller:
    """Who an accepted token speaks for: the tenant, its funds and its intake limit."""

    tenant: str
    funds: list[fund_rules.Fund]
    rate_per_s: float
    burst: int


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)

    def live(self) -> ApiTokenQuerySet:
        """Tokens the API accepts now: not revoked, not expired."""
        return self.active().filter(Q(expires_at__isnull=True) | Q(expires_at__gt=clock.now()))


class ApiToken(models.Model):
    """A bearer token for the intake API, mapping its holder to a tenant.

    Only the SHA-256 of the token is stored; the token itself is shown once, when issued.
    """

    tenant = models.CharField(max_length=64, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the token's last characters")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="empty: never expires")
    last_used_at = models.DateTimeField(
        null=True, blank=True, help_text="to the minute: written at most once a minute"
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        db_table = "dashboard_apitoken"
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.tenant} …{self.hint}"

    @classmethod
    def issue(cls, tenant: str, *, expires_in: timedelta | None = None) -> tuple[ApiToken, str]:
        """A new token for ``tenant`` (created, with ``DEFAULT_FUNDS``, on its first
        token); the raw token is returned once and never stored. ``expires_in``: none,
        the token lives until revoked."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = clock.now()
        with transaction.atomic():
            Tenant.objects.provision(tenant)
            token = cls.objects.create(
                tenant=tenant,
                token_hash=hash_token(raw),
                hint=raw[-6:],
                created_at=now,
                expires_at=now + expires_in if expires_in is not None else None,
            )
        return token, raw

    def revoke(self) -> bool:
        """Mark the token revoked (the row stays, for the record); ``False`` if it was."""
        if self.revoked_at is not None:
            return False
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])
        return True

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= clock.now()

    @property
    def state(self) -> str:
        """``revoked``, ``expired`` or ``active`` (revoked wins: it was a decision)."""
        if not self.is_active:
            return "revoked"
        return "expired" if self.is_expired else "active"

    @classmethod
    def authenticate(cls, raw: str) -> Caller | TokenRefusal:
        """The caller ``raw`` speaks for, or why it is refused: the API's one database
        query, by hash, with a constant-time final comparison. Two ORM queries cost more
        than the pledge's own Python work on the request path (their SQL is compiled anew
        on every request); this one is written once. A second query, the ``last_used_at``
        update, runs at most once a minute per token."""
        digest = hash_token(raw)
        with connection.cursor() as cursor:
            cursor.execute(_caller_sql(), [digest])
            rows = cursor.fetchall()
        if not rows or not hmac.compare_digest(rows[0][2], digest):
            return TokenRefusal.UNKNOWN
        pk, tenant, _hash, revoked_at, expires_at, last_used_at, rate, burst = rows[0][:8]
        now = clock.now()
        if revoked_at is not None:
            return TokenRefusal.REVOKED
        expires = _db_datetime(expires_at)
        if expires is not None and expires <= now:
            return TokenRefusal.EXPIRED
        last_used = _db_datetime(last_used_at)
        if last_used is None or now - last_used >= LAST_USED_EVERY:
            # Conditional, so concurrent requests of the same minute do not all write.
            # Bookkeeping only: a database busy with another writer (SQLite's "table is
            # locked" under concurrent first uses) never refuses the request.
            try:
                cls.objects.filter(pk=pk).filter(
                    Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_EVERY)
                ).update(last_used_at=now)
            except DatabaseError as exc:
                logger.warning("token last use not recorded: %s", exc.__class__.__name__)
        funds = [
            fund_rules.Fund(code=code, currency=currency, max_amount=_stored_amount(top))
            for *_token, code, currency, top in rows
            if code is not None
        ]
        return Caller(
            tenant=tenant,
            funds=funds,
            rate_per_s=float(rate) if rate is not None else float(settings.INTAKE_RATE_PER_S),
            burst=int(burst) if burst is not None else int(settings.INTAKE_BURST),
        )


def _db_datetime(value: datetime | str | None) -> datetime | None:
    """A datetime column read by the raw cursor: SQLite hands back a naive UTC datetime
    (or text), PostgreSQL an aware one."""
    if value is None:
        return None
    at = parse_datetime(value) if isinstance(value, str) else value
    if at is None:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _stored_amount(value: Decimal | float | int | str) -> Decimal:
    """A ``max_amount`` as the ORM would hand it back: SQLite returns a DECIMAL column as
    a float or an int, which Django's SQLite backend reads at 15 significant digits;
    others return a Decimal. Quantized to the field's places, then normalised as
    ``Fund.as_rule`` does."""
    if isinstance(value, float):
        value = Context(prec=15).create_decimal_from_float(value)
    places = Decimal(1).scaleb(-Fund._meta.get_field("max_amount").decimal_places)
    return Decimal(value).quantize(places, context=Context(prec=MAX_PREC)).normalize()


@functools.cache
def _caller_sql() -> str:
    """A token, with its state, its tenant's intake limit and the tenant's funds in
    ``Fund``'s order (code, currency)."""
    quote = connection.ops.quote_name
    token, tenant, fund = (quote(m._meta.db_table) for m in (ApiToken, Tenant, Fund))
    # Only table names from the models, quoted, are formatted in; the token is a parameter.
    return (
        "SELECT t.id, t.tenant, t.token_hash, t.revoked_at, t.expires_at, t.last_used_at, "  # noqa: S608
        "n.intake_rate_per_s, n.intake_burst, f.code, f.currency, f.max_amount "
        f"FROM {token} t "
        f"LEFT JOIN {tenant} n ON n.name = t.tenant "
        f"LEFT JOIN {fund} f ON f.tenant_id = n.id "
        "WHERE t.token_hash = %s ORDER BY f.code, f.currency"
    )


def default_funds() -> list[fund_rules.Fund]:
    """``settings.DEFAULT_FUNDS`` as funds (``ValueError`` names a bad entry)."""
    return fund_rules.funds_spec_parse(
        settings.DEFAULT_FUNDS,
        default_currency=settings.FUND_DEFAULT_CURRENCY,
        default_max=settings.FUND_DEFAULT_MAX_AMOUNT,
    )


class TenantManager(models.Manager["Tenant"]):
    def provision(self, name: str) -> Tenant:
        """The tenant ``name``, created with ``DEFAULT_FUNDS`` if it is new."""
        tenant, created = self.get_or_create(name=name)
        if created:
            tenant.funds_register(default_funds())
        return tenant


class Tenant(models.Model):
    """A caller of the intake API: its tokens and its registered funds belong to it.

    Created with its first token or fund; it starts with ``settings.DEFAULT_FUNDS``.
    """

    name = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The intake rate limit (dashboard/api/intake_limit.py); empty: the settings' default.
    intake_rate_per_s = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="intake requests per second (refill); empty: INTAKE_RATE_PER_S",
    )
    intake_burst = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="intake requests accepted at once (bucket size); empty: INTAKE_BURST",
    )

    objects = TenantManager()

    class Meta:
        db_table = "dashboard_tenant"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def funds_register(self, funds: Iterable[fund_rules.Fund]) -> list[Fund]:
        """Register each fund, or update its largest single amount if it exists."""
        return [
            Fund.objects.update_or_create(
                tenant=self,
                code=f.code,
                currency=f.currency,
                defaults={"max_amount": f.max_amount},
            )[0]
            for f in funds
        ]


class Fund(models.Model):
    """A fund a tenant may pledge to, in one currency, with the largest single amount
    intake accepts for it (in that currency's major units). One fund code may be
    registered in several currencies: each is its own ledger (``CODE#CURRENCY``)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="funds")
    code = models.CharField(max_length=32)
    currency = models.CharField(max_length=3)
    max_amount = models.DecimalField(max_digits=18, decimal_places=3)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_fund"
        ordering = ["tenant__name", "code", "currency"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "code", "currency"], name="fund_once_per_tenant_currency"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.code} {self.currency}"

    def as_rule(self) -> fund_rules.Fund:
        """The plain fund intake checks a request against."""
        return fund_rules.Fund(
            code=self.code, currency=self.currency, max_amount=self.max_amount.normalize()
        )


# Bounds of an endpoint's delivery limits (the admin and add_webhook refuse others).
MAX_IN_FLIGHT_LIMIT = 64
MIN_RATE_PER_S = 0.01
MAX_RATE_PER_S = 10_000.0


class WebhookEndpoint(models.Model):
    """A tenant's acknowledgement receiver (docs/webhooks.md): where its signed
    ``pledge.recorded`` events are POSTed. The signing secret is shown once, when the
    endpoint is registered, and never again; only its last characters are displayed."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(max_length=2000)
    events = models.CharField(
        max_length=200, default="pledge.recorded", help_text="comma-separated event types"
    )
    secret = models.CharField(max_length=100)
    # The secret a rotation replaced, and until when deliveries are also signed with it
    # (``WEBHOOK_PREVIOUS_SECRET_S`` after the rotation): a receiver changes at leisure.
    previous_secret = models.CharField(max_length=100, blank=True, default="")
    previous_secret_until = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Counted by the dispatcher after each attempt (an SQL increment, never a scan of
    # pledges): the Acknowledgements page's failure rate and last success.
    attempts = models.PositiveBigIntegerField(default=0)
    failures = models.PositiveBigIntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    # Since when every attempt to it has failed (none answered 2xx since); ``None`` while
    # it answers. A day of it disables the endpoint (``disabled_at``; docs/webhooks.md).
    failing_since = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    # Delivery limits (docs/webhooks.md, "Isolation"), per dispatcher: requests open to
    # it at once, and deliveries a second (none: as fast as it answers).
    max_in_flight = models.PositiveSmallIntegerField(
        default=ack_models.DEFAULT_MAX_IN_FLIGHT,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_IN_FLIGHT_LIMIT)],
        help_text="requests one dispatcher keeps open to it at once",
    )
    rate_per_s = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(MIN_RATE_PER_S), MaxValueValidator(MAX_RATE_PER_S)],
        help_text="deliveries a second per dispatcher at most; empty: no limit",
    )
    # Its circuit breaker as a dispatcher last moved it: shown on the Acknowledgements
    # page, and read by every dispatcher (an open breaker pauses it for all of them).
    breaker_state = models.CharField(
        max_length=10,
        choices=[(s.value, s.label) for s in ack_models.BreakerState],
        default=ack_models.BreakerState.CLOSED.value,
    )
    breaker_until = models.DateTimeField(null=True, blank=True)
    breaker_failures = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "dashboard_webhookendpoint"
        ordering = ["tenant__name", "pk"]

    def __str__(self) -> str:
        return f"{self.tenant.name}: {self.url}"

    @property
    def secret_hint(self) -> str:
        return "…" + self.secret[-4:]

    @property
    def previous_secret_hint(self) -> str:
        return "…" + self.previous_secret[-4:] if self.previous_secret else ""

    def event_list(self) -> tuple[str, ...]:
        return tuple(e for e in (p.strip() for p in self.events.split(",")) if e)

    @property
    def failure_rate(self) -> float | None:
        """The share of attempts that failed, or ``None`` before the first."""
        return self.failures / self.attempts if self.attempts else None

    @classmethod
    def attempt_count(cls, endpoint_id: str, *, ok: bool, at: datetime) -> None:
        """Count one attempt to the endpoint ``E<pk>`` (the dispatcher's id)."""
        cls.attempts_count(endpoint_id, [(ok, at)])

    @classmethod
    def attempts_count(cls, endpoint_id: str, attempts: Sequence[tuple[bool, datetime]]) -> None:
        """Count ``attempts`` (answered 2xx or not, and when) to the endpoint ``E<pk>``
        (the dispatcher's id), in one UPDATE with ``F()`` increments: dispatchers
        counting at once lose no count. As if counted one by one: the latest success and
        failure are kept, and a pause over by the latest success is closed (counting
        never sets a pause, so the latest success closes every one an earlier would).
        One UPDATE for a dispatcher's run of attempts, not one each: building the
        statement costs the dispatcher more CPU than the delivery's own DynamoDB write."""
        pk = endpoint_id.removeprefix("E")
        if not pk.isdigit() or not attempts:
            return
        succeeded = [at for ok, at in attempts if ok]
        failed = [at for ok, at in attempts if not ok]
        changes: dict[str, Any] = {"attempts": F("attempts") + len(attempts)}
        if succeeded:
            at = max(succeeded)
            changes["last_success_at"] = at
            # Answered after its pause: whichever dispatcher sent it, the breaker the row
            # shows is closed (the one that opened it may have died before its trial). A
            # pause still running, another dispatcher's, is left as it is.
            over = Q(breaker_until__isnull=True) | Q(breaker_until__lte=at)
            closed = ack_models.BreakerState.CLOSED.value
            changes["breaker_state"] = Case(
                When(over, then=Value(closed)),
                default=F("breaker_state"),
                output_field=models.CharField(),
            )
            changes["breaker_until"] = Case(
                When(over, then=None),
                default=F("breaker_until"),
                output_field=models.DateTimeField(),
            )
            changes["breaker_failures"] = Case(
                When(over, then=Value(0)),
                default=F("breaker_failures"),
                output_field=models.PositiveIntegerField(),
            )
        if failed:
            changes["failures"] = F("failures") + len(failed)
            changes["last_failure_at"] = max(failed)
        cls.objects.filter(pk=int(pk)).update(**changes)

    def as_endpoint(self) -> ack_models.Endpoint:
        return ack_models.Endpoint(
            endpoint_id=f"E{self.pk}",
            tenant=self.tenant.name,
            url=self.url,
            secret=self.secret,
            events=self.event_list(),
            enabled=self.enabled,
            previous_secret=self.previous_secret,
            previous_secret_until=self.previous_secret_until,
            max_in_flight=self.max_in_flight,
            rate_per_s=self.rate_per_s,
            paused_until=self.breaker_until if self.breaker_open else None,
        )

    @property
    def breaker(self) -> ack_models.BreakerState:
        return ack_models.BreakerState.read(self.breaker_state)

    @property
    def breaker_open(self) -> bool:
        """Paused by its circuit breaker now (an open breaker past its pause is trying)."""
        return (
            self.breaker == ack_models.BreakerState.OPEN
            and self.breaker_until is not None
            and self.breaker_until > clock.now()
        )

    @property
    def breaker_trying(self) -> bool:
        """Its pause is over and a trial delivery decides (or is about to)."""
        return self.breaker != ack_models.BreakerState.CLOSED and not self.breaker_open

    @classmethod
    def breaker_note(
        cls,
        endpoint_id: str,
        *,
        state: ack_models.BreakerState,
        until: datetime | None,
        failures: int,
    ) -> None:
        """Write the breaker's move (one UPDATE): the page shows it, the other
        dispatchers pause the endpoint while it is open."""
        pk = endpoint_id.removeprefix("E")
        if pk.isdigit():
            cls.objects.filter(pk=int(pk)).update(
                breaker_state=state, breaker_until=until, breaker_failures=failures
            )


class DeliveryAttempt(models.Model):
    """One POST of one pledge's event to one endpoint, as the dispatcher made it: the
    attempt log staff read per endpoint and per pledge (dashboard/tenancy/delivery_log.py).

    Written by the dispatcher's edge after each attempt; the delivery's own state stays
    on the pledge item in DynamoDB, so a row lost here costs a line of history, never a
    delivery. Kept ``DELIVERY_ATTEMPT_RETENTION_DAYS``, then pruned daily."""

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="attempt_log"
    )
    tenant = models.CharField(max_length=150)
    intent_id = models.CharField(max_length=500)
    event_type = models.CharField(max_length=40)
    webhook_id = models.CharField(max_length=64)
    at = models.DateTimeField()
    # The HTTP status, or none when no answer came (``error`` says why).
    code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=200, blank=True, default="")
    duration_ms = models.FloatField(default=0.0)
    # Answered 2xx: stored rather than derived from ``code`` so the "failed" filter and
    # the bulk resend's selection are one index range.
    ok = models.BooleanField()

    class Meta:
        db_table = "dashboard_deliveryattempt"
        indexes = [
            # An endpoint's page, newest first, and its failures since a time.
            models.Index(fields=["endpoint", "-at"], name="attempt_endpoint_recent"),
            models.Index(fields=["endpoint", "ok", "-at"], name="attempt_endpoint_outcome"),
            # A pledge's page.
            models.Index(fields=["tenant", "intent_id", "-at"], name="attempt_pledge_recent"),
            # The daily prune: one range of old rows.
            models.Index(fields=["at"], name="attempt_at"),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} to E{self.endpoint_id} at {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def client_key(self) -> str:
        """The client's own ``Idempotency-Key`` (the pledge page's URL part)."""
        return self.intent_id.partition("#")[2]

    @property
    def event(self) -> ack_models.EventType:
        return ack_models.EventType.read(self.event_type)
