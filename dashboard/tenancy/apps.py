from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "dashboard.tenancy"
    label = "tenancy"
    verbose_name = "Tenants"

    def ready(self) -> None:
        from dashboard.tenancy import disabled_endpoints  # noqa: PLC0415 - app registry ready

        disabled_endpoints.connect()  # the supervisors' daily e-mail asks for them
