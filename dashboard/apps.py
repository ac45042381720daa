from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Reconciliation dashboard"

    def ready(self) -> None:
        from dashboard import disabled_endpoints, notifications
        from dashboard.accounts import signin_audit, staff_sessions

        signin_audit.connect()  # after axes' receivers: its count is known to ours
        staff_sessions.connect()
        notifications.connect()  # the override expiry, announced by casework
        disabled_endpoints.connect()  # the supervisors' daily e-mail asks for them
