"""The dashboard app's models belong to the apps that own them now (tenancy, accounts,
staff); their tables stay, under the same names."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0001_initial"),
        ("accounts", "0001_initial"),
        ("staff", "0001_initial"),
        ("dashboard", "0015_webhook_delivery_limits"),
    ]

    operations = [
        # The tables stay as they are (each model's db_table names it): only Django's
        # idea of which app holds the model changes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name="ApiToken",
                ),
                migrations.RemoveField(
                    model_name="fund",
                    name="tenant",
                ),
                migrations.RemoveField(
                    model_name="notification",
                    name="recipient",
                ),
                migrations.RemoveField(
                    model_name="savedview",
                    name="user",
                ),
                migrations.RemoveField(
                    model_name="staffprofile",
                    name="user",
                ),
                migrations.RemoveField(
                    model_name="staffsession",
                    name="user",
                ),
                migrations.RemoveField(
                    model_name="webhookendpoint",
                    name="tenant",
                ),
                migrations.DeleteModel(
                    name="DeliveryAttempt",
                ),
                migrations.DeleteModel(
                    name="Fund",
                ),
                migrations.DeleteModel(
                    name="Notification",
                ),
                migrations.DeleteModel(
                    name="SavedView",
                ),
                migrations.DeleteModel(
                    name="StaffProfile",
                ),
                migrations.DeleteModel(
                    name="StaffSession",
                ),
                migrations.DeleteModel(
                    name="Tenant",
                ),
                migrations.DeleteModel(
                    name="WebhookEndpoint",
                ),
            ],
        ),
    ]
