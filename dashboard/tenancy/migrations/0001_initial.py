"""Tenants, tokens, funds, webhook endpoints and the delivery attempt log, on the tables
the dashboard app created for them."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


MOVED = ("apitoken", "tenant", "fund", "webhookendpoint", "deliveryattempt")


def content_types_follow(apps, schema_editor):
    """The models' content types (and so their permissions and admin log entries) name
    this app now; a type already created under this app is left as it is."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label="tenancy", model=model).exists():
            content_type.objects.filter(app_label="dashboard", model=model).update(
                app_label="tenancy"
            )


def content_types_return(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="tenancy", model__in=MOVED).update(app_label="dashboard")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("dashboard", "0015_webhook_delivery_limits"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        # The tables stay as they are (each model's db_table names it): only Django's
        # idea of which app holds the model changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tenant", models.CharField(db_index=True, max_length=64)),
                        ("token_hash", models.CharField(max_length=64, unique=True)),
                        (
                            "hint",
                            models.CharField(
                                help_text="the token's last characters", max_length=12
                            ),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "expires_at",
                            models.DateTimeField(
                                blank=True, help_text="empty: never expires", null=True
                            ),
                        ),
                        (
                            "last_used_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="to the minute: written at most once a minute",
                                null=True,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "API token",
                        "db_table": "dashboard_apitoken",
                    },
                ),
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "intake_rate_per_s",
                            models.FloatField(
                                blank=True,
                                help_text="intake requests per second (refill); empty: INTAKE_RATE_PER_S",
                                null=True,
                                validators=[django.core.validators.MinValueValidator(0.001)],
                            ),
                        ),
                        (
                            "intake_burst",
                            models.PositiveIntegerField(
                                blank=True,
                                help_text="intake requests accepted at once (bucket size); empty: INTAKE_BURST",
                                null=True,
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_tenant",
                        "ordering": ["name"],
                    },
                ),
                migrations.CreateModel(
                    name="WebhookEndpoint",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("url", models.CharField(max_length=2000)),
                        (
                            "events",
                            models.CharField(
                                default="pledge.recorded",
                                help_text="comma-separated event types",
                                max_length=200,
                            ),
                        ),
                        ("secret", models.CharField(max_length=100)),
                        (
                            "previous_secret",
                            models.CharField(blank=True, default="", max_length=100),
                        ),
                        ("previous_secret_until", models.DateTimeField(blank=True, null=True)),
                        ("enabled", models.BooleanField(default=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("attempts", models.PositiveBigIntegerField(default=0)),
                        ("failures", models.PositiveBigIntegerField(default=0)),
                        ("last_success_at", models.DateTimeField(blank=True, null=True)),
                        ("last_failure_at", models.DateTimeField(blank=True, null=True)),
                        ("failing_since", models.DateTimeField(blank=True, null=True)),
                        ("disabled_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "max_in_flight",
                            models.PositiveSmallIntegerField(
                                default=8,
                                help_text="requests one dispatcher keeps open to it at once",
                                validators=[
                                    django.core.validators.MinValueValidator(1),
                                    django.core.validators.MaxValueValidator(64),
                                ],
                            ),
                        ),
                        (
                            "rate_per_s",
                            models.FloatField(
                                blank=True,
                                help_text="deliveries a second per dispatcher at most; empty: no limit",
                                null=True,
                                validators=[
                                    django.core.validators.MinValueValidator(0.01),
                                    django.core.validators.MaxValueValidator(10000.0),
                                ],
                            ),
                        ),
                        (
                            "breaker_state",
                            models.CharField(
                                choices=[
                                    ("CLOSED", "Sending"),
                                    ("OPEN", "Paused"),
                                    ("HALF_OPEN", "Trying"),
                                ],
                                default="CLOSED",
                                max_length=10,
                            ),
                        ),
                        ("breaker_until", models.DateTimeField(blank=True, null=True)),
                        ("breaker_failures", models.PositiveIntegerField(default=0)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="webhooks",
                                to="tenancy.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_webhookendpoint",
                        "ordering": ["tenant__name", "pk"],
                    },
                ),
                migrations.CreateModel(
                    name="Fund",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("code", models.CharField(max_length=32)),
                        ("currency", models.CharField(max_length=3)),
                        ("max_amount", models.DecimalField(decimal_places=3, max_digits=18)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="funds",
                                to="tenancy.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_fund",
                        "ordering": ["tenant__name", "code", "currency"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "code", "currency"),
                                name="fund_once_per_tenant_currency",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="DeliveryAttempt",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("tenant", models.CharField(max_length=150)),
                        ("intent_id", models.CharField(max_length=500)),
                        ("event_type", models.CharField(max_length=40)),
                        ("webhook_id", models.CharField(max_length=64)),
                        ("at", models.DateTimeField()),
                        ("code", models.PositiveSmallIntegerField(blank=True, null=True)),
                        ("error", models.CharField(blank=True, default="", max_length=200)),
                        ("duration_ms", models.FloatField(default=0.0)),
                        ("ok", models.BooleanField()),
                        (
                            "endpoint",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="attempt_log",
                                to="tenancy.webhookendpoint",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_deliveryattempt",
                        "indexes": [
                            models.Index(
                                fields=["endpoint", "-at"], name="attempt_endpoint_recent"
                            ),
                            models.Index(
                                fields=["endpoint", "ok", "-at"], name="attempt_endpoint_outcome"
                            ),
                            models.Index(
                                fields=["tenant", "intent_id", "-at"], name="attempt_pledge_recent"
                            ),
                            models.Index(fields=["at"], name="attempt_at"),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
