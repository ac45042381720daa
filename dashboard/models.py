"""Django-side models: only what authenticates callers. Domain data lives in DynamoDB."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "plg_"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A bearer token for the intake API, mapping its holder to a tenant.

    Only the SHA-256 of the token is stored; the token itself is shown once, when issued.
    """

    tenant = models.CharField(max_length=64, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the token's last characters")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.tenant} …{self.hint}"

    @classmethod
    def issue(cls, tenant: str) -> tuple[ApiToken, str]:
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(tenant=tenant, token_hash=hash_token(raw), hint=raw[-6:])
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> str | None:
        """The tenant for ``raw``, or ``None``. The lookup is by hash; the final
        comparison is constant-time."""
        digest = hash_token(raw)
        token = cls.objects.active().filter(token_hash=digest).first()
        if token is None or not hmac.compare_digest(token.token_hash, digest):
            return None
        return token.tenant


class Tenant(models.Model):
    """A caller of the intake API: its tokens and its registered funds belong to it.

    Created with its first token or fund; it starts with ``settings.DEFAULT_FUNDS``.
    """

    name = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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
        ordering = ["tenant__name", "code", "currency"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "code", "currency"], name="fund_once_per_tenant_currency"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.code} {self.currency}"


class StaffProfile(models.Model):
    """A staff member's own settings: the time zone pages show times in."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="staff_profile")
    time_zone = models.CharField(max_length=64, default="UTC")

    def __str__(self) -> str:
        return f"{self.user} ({self.time_zone})"
