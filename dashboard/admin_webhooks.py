"""The webhook endpoint admin (docs/webhooks.md): the endpoints of every tenant, read
only. An endpoint is registered with ``add_webhook``, which prints its signing secret
once; here the secret is never shown, only its last characters. Registered on the admin
site by dashboard/admin.py importing it."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from dashboard.admin import site
from dashboard.models import WebhookEndpoint


@admin.register(WebhookEndpoint, site=site)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ("tenant", "url", "events", "enabled", "secret_hint", "created_at")
    list_filter = ("enabled",)
    search_fields = ("tenant__name", "url")
    # ``secret`` is left out of every form and list: it was shown once, at registration.
    fields = ("tenant", "url", "events", "enabled", "secret_hint", "created_at")
    readonly_fields = fields

    @admin.display(description="signing secret")
    def secret_hint(self, obj: WebhookEndpoint) -> str:
        return obj.secret_hint

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # add_webhook registers (and audits) an endpoint

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
