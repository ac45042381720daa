from django.apps import AppConfig


class StaffConfig(AppConfig):
    name = "dashboard.staff"
    label = "staff"
    verbose_name = "Staff pages"
