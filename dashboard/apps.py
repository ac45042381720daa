from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Reconciliation dashboard"

    def ready(self) -> None:
        # The accounts app is installed before django.contrib.auth (its changepassword
        # wins), so before axes too: its receivers are connected here, from the last app.
        from dashboard.accounts import (  # noqa: PLC0415 - once the app registry is ready
            signin_audit,
            staff_sessions,
        )

        signin_audit.connect()  # after axes' receivers: its count is known to ours
        staff_sessions.connect()
