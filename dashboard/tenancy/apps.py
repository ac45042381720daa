from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "dashboard.tenancy"
    label = "tenancy"
    verbose_name = "Tenants"
