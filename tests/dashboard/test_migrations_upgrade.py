"""Upgrading an installation whose rows were written while the ``dashboard`` app held
every model: the apps that own them now (tenancy, accounts, staff) find each row in the
same table, foreign keys to each other and to ``auth.User`` included, and the content
types (so permissions) follow the models."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from dashboard.accounts.models import StaffProfile, StaffSession
from dashboard.staff.models import Notification, NotificationKind, SavedView
from dashboard.tenancy.models import (
    ApiToken,
    Caller,
    DeliveryAttempt,
    Fund,
    Tenant,
    WebhookEndpoint,
    hash_token,
)

# The last migration of the app that held every model.
OLD_LEAF = [("dashboard", "0015_webhook_delivery_limits")]
# The database as it was then: none of the new apps' migrations applied either.
BEFORE_THE_MOVE = [*OLD_LEAF, ("tenancy", None), ("accounts", None), ("staff", None)]
RAW_TOKEN = "plg_before-the-move"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _rows_written_under_the_old_app() -> dict[str, int]:
    """One row in every moved table, through the models as the old app had them; the
    primary key of each, by model name."""
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_THE_MOVE)
    old = executor.loader.project_state(OLD_LEAF).apps

    def model(name: str):
        return old.get_model("dashboard", name)

    user = old.get_model("auth", "User").objects.create(username="ada")
    tenant = model("Tenant").objects.create(name="acme", intake_burst=7)
    fund = model("Fund").objects.create(
        tenant=tenant, code="GENERAL", currency="USD", max_amount=Decimal("1000")
    )
    token = model("ApiToken").objects.create(
        tenant="acme", token_hash=hash_token(RAW_TOKEN), hint=RAW_TOKEN[-6:]
    )
    endpoint = model("WebhookEndpoint").objects.create(
        tenant=tenant, url="https://acme.example/hooks", secret="s" * 32
    )
    attempt = model("DeliveryAttempt").objects.create(
        endpoint=endpoint,
        tenant="acme",
        intent_id="acme#key-1",
        event_type="pledge.recorded",
        webhook_id="wh-1",
        at=AT,
        code=200,
        ok=True,
    )
    profile = model("StaffProfile").objects.create(user=user, time_zone="Europe/Paris")
    session = model("StaffSession").objects.create(key_hash="k" * 64, user=user)
    notification = model("Notification").objects.create(
        recipient=user,
        kind=NotificationKind.MENTION.value,
        case_id="C-1",
        actor="grace",
        action="note_added",
    )
    view = model("SavedView").objects.create(user=user, name="mine", query="queue=triage")
    # The content type and a permission as post_migrate left them under the old app
    # (neither model moves: today's are the old app's).
    content_type, _ = ContentType.objects.get_or_create(app_label="dashboard", model="apitoken")
    permission = Permission.objects.create(
        content_type=content_type, codename="view_apitoken_moved", name="Can view API token"
    )
    return {
        "User": user.pk,
        "Tenant": tenant.pk,
        "Fund": fund.pk,
        "ApiToken": token.pk,
        "WebhookEndpoint": endpoint.pk,
        "DeliveryAttempt": attempt.pk,
        "StaffProfile": profile.pk,
        "StaffSession": session.pk,
        "Notification": notification.pk,
        "SavedView": view.pk,
        "ContentType": content_type.pk,
        "Permission": permission.pk,
    }


@pytest.mark.django_db(transaction=True)
def test_every_row_written_before_the_move_is_found_after_it():
    pk = _rows_written_under_the_old_app()
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    tenant = Tenant.objects.get(pk=pk["Tenant"])
    assert (tenant.name, tenant.intake_burst) == ("acme", 7)
    assert Fund.objects.get(pk=pk["Fund"]).tenant == tenant
    assert ApiToken.objects.get(pk=pk["ApiToken"]).tenant == "acme"
    endpoint = WebhookEndpoint.objects.get(pk=pk["WebhookEndpoint"])
    assert endpoint.tenant == tenant
    assert list(tenant.webhooks.all()) == [endpoint]
    attempt = DeliveryAttempt.objects.get(pk=pk["DeliveryAttempt"])
    assert (attempt.endpoint, attempt.at, attempt.ok) == (endpoint, AT, True)
    # The API's one raw query names the tables through the models.
    caller = ApiToken.authenticate(RAW_TOKEN)
    assert isinstance(caller, Caller)
    assert (caller.tenant, caller.funds) == ("acme", [f.as_rule() for f in tenant.funds.all()])

    user = User.objects.get(pk=pk["User"])
    assert user.staff_profile == StaffProfile.objects.get(pk=pk["StaffProfile"])
    assert user.staff_profile.time_zone == "Europe/Paris"
    assert list(user.staff_sessions.all()) == [StaffSession.objects.get(pk=pk["StaffSession"])]
    notification = Notification.objects.get(pk=pk["Notification"])
    assert list(user.notifications.all()) == [notification]
    assert notification.kind_code is NotificationKind.MENTION
    assert list(user.saved_views.all()) == [SavedView.objects.get(pk=pk["SavedView"])]

    content_type = ContentType.objects.get_for_model(ApiToken)
    assert content_type.pk == pk["ContentType"]
    assert (content_type.app_label, content_type.model) == ("tenancy", "apitoken")
    assert Permission.objects.get(pk=pk["Permission"]).content_type == content_type

    # New rows land in the same tables, after the old ones.
    assert (
        Fund.objects.create(
            tenant=tenant, code="RELIEF", currency="USD", max_amount=Decimal("50")
        ).pk
        > pk["Fund"]
    )
    call_command("migrate", verbosity=0)


def test_every_model_keeps_its_table():
    tables = {
        model.__name__: model._meta.db_table
        for model in (
            ApiToken,
            Tenant,
            Fund,
            WebhookEndpoint,
            DeliveryAttempt,
            StaffProfile,
            StaffSession,
            Notification,
            SavedView,
        )
    }
    assert tables == {name: f"dashboard_{name.lower()}" for name in tables}
