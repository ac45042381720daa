from django.apps import AppConfig


class StaffConfig(AppConfig):
    name = "dashboard.staff"
    label = "staff"
    verbose_name = "Staff pages"

    def ready(self) -> None:
        from dashboard.staff import notifications  # noqa: PLC0415 - once the app registry is ready

        notifications.connect()  # the override expiry, announced by casework
