"""Notifications and saved views, on the tables the dashboard app created for them."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ("notification", "savedview")


def content_types_follow(apps, schema_editor):
    """The models' content types (and so their permissions and admin log entries) name
    this app now; a type already created under this app is left as it is."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label="staff", model=model).exists():
            content_type.objects.filter(app_label="dashboard", model=model).update(
                app_label="staff"
            )


def content_types_return(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="staff", model__in=MOVED).update(app_label="dashboard")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("dashboard", "0015_webhook_delivery_limits"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The tables stay as they are (each model's db_table names it): only Django's
        # idea of which app holds the model changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Notification",
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
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("assigned_to_you", "Assigned to you"),
                                    ("approval_waiting", "Approval waiting for you"),
                                    ("override_decided", "Your override was decided"),
                                    ("mentioned", "Mentioned you"),
                                ],
                                max_length=32,
                            ),
                        ),
                        ("case_id", models.CharField(max_length=200)),
                        ("actor", models.CharField(max_length=150)),
                        ("action", models.CharField(max_length=40)),
                        ("override", models.CharField(blank=True, default="", max_length=40)),
                        ("excerpt", models.CharField(blank=True, default="", max_length=200)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("read_at", models.DateTimeField(blank=True, null=True)),
                        ("request_id", models.CharField(blank=True, default="", max_length=64)),
                        (
                            "settled_by_action",
                            models.CharField(blank=True, default="", max_length=40),
                        ),
                        ("settled_by", models.CharField(blank=True, default="", max_length=150)),
                        (
                            "recipient",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="notifications",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_notification",
                        "indexes": [
                            models.Index(
                                fields=["recipient", "read_at"], name="notification_unread"
                            ),
                            models.Index(
                                fields=["recipient", "-created_at"], name="notification_recent"
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="SavedView",
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
                        ("name", models.CharField(max_length=80)),
                        ("query", models.CharField(blank=True, default="", max_length=2000)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="saved_views",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_savedview",
                        "ordering": ("name",),
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("user", "name"), name="saved_view_name_per_user"
                            )
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
