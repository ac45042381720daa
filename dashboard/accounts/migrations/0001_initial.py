"""Staff profiles and sessions, on the tables the dashboard app created for them."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


MOVED = ("staffprofile", "staffsession")


def content_types_follow(apps, schema_editor):
    """The models' content types (and so their permissions and admin log entries) name
    this app now; a type already created under this app is left as it is."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not content_type.objects.filter(app_label="accounts", model=model).exists():
            content_type.objects.filter(app_label="dashboard", model=model).update(
                app_label="accounts"
            )


def content_types_return(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.filter(app_label="accounts", model__in=MOVED).update(app_label="dashboard")


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
                    name="StaffProfile",
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
                        ("time_zone", models.CharField(default="UTC", max_length=64)),
                        (
                            "user",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="staff_profile",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_staffprofile",
                    },
                ),
                migrations.CreateModel(
                    name="StaffSession",
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
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        ("user_agent", models.CharField(blank=True, default="", max_length=300)),
                        ("address", models.CharField(blank=True, default="", max_length=64)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_seen", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="staff_sessions",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "dashboard_staffsession",
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
