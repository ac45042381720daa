"""The webhook endpoint admin (docs/webhooks.md): the endpoints of every tenant, read
only. An endpoint is registered with ``add_webhook``, which prints its signing secret
once; here the secret is never shown, only its last characters. Its page has a "Rotate
signing secret" button (``rotate_webhook_secret`` in the admin): confirmed by a POST,
audited, and the new secret shown on the answer alone. Registered on the admin site by
dashboard/tenancy/admin.py importing it. Its delivery limits (requests at once, deliveries a
second) are the one thing the page changes, audited (``webhook_limits_set``)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.cache import patch_cache_control

from dashboard.accounts.views import AUDIT_UNAVAILABLE, NOT_RECORDED
from dashboard.tenancy.admin import admin_actor, site
from dashboard.tenancy.models import WebhookEndpoint
from dashboard.tenancy.tenant_changes import webhook_limits_set, webhook_secret_rotate
from reconciliation import clock

ROTATE_TEMPLATE = "admin/tenancy/webhookendpoint/rotate.html"


def _duration(seconds: int) -> str:
    return f"{seconds // 3600} h" if seconds % 3600 == 0 else f"{seconds} s"


@admin.register(WebhookEndpoint, site=site)
class WebhookEndpointAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic in django-stubs only
    list_display = ("tenant", "url", "events", "enabled", "secret_hint", "created_at")
    list_filter = ("enabled",)
    search_fields = ("tenant__name", "url")
    # ``secret`` and ``previous_secret`` are left out of every form and list: each was
    # shown once, when it was made.
    fields = (
        "tenant",
        "url",
        "events",
        "enabled",
        "max_in_flight",
        "rate_per_s",
        "breaker_state",
        "breaker_until",
        "secret_hint",
        "previous_secret_state",
        "created_at",
    )
    # The delivery limits are the one thing changed here (audited: save_model).
    readonly_fields = tuple(f for f in fields if f not in ("max_in_flight", "rate_per_s"))
    change_form_template = "admin/tenancy/webhookendpoint/change_form.html"

    @admin.display(description="signing secret")
    def secret_hint(self, obj: WebhookEndpoint) -> str:
        return obj.secret_hint

    @admin.display(description="previous secret")
    def previous_secret_state(self, obj: WebhookEndpoint) -> str:
        until = obj.previous_secret_until
        if not obj.previous_secret or until is None:
            return "none: never rotated"
        verb = "also signs until" if clock.now() < until else "expired at"
        return f"{obj.previous_secret_hint} {verb} {clock.plain(until)}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # add_webhook registers (and audits) an endpoint

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_change_permission(request, obj)  # the delivery limits only

    def save_model(
        self,
        request: HttpRequest,
        obj: WebhookEndpoint,
        form: forms.ModelForm[WebhookEndpoint],
        change: bool,
    ) -> None:
        """The limits through their audited service (never ``obj.save()``): a change the
        audit trail refused is not made, and the page says so."""
        try:
            webhook_limits_set(
                obj.pk,
                max_in_flight=obj.max_in_flight,
                rate_per_s=obj.rate_per_s,
                actor=admin_actor(request),
            )
        except AUDIT_UNAVAILABLE as exc:
            raise PermissionDenied(NOT_RECORDED) from exc

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        rotate = self.admin_site.admin_view(self.rotate_view)
        return [
            path("<int:endpoint_id>/rotate/", rotate, name="tenancy_webhookendpoint_rotate"),
            *super().get_urls(),
        ]

    def rotate_view(self, request: HttpRequest, endpoint_id: int) -> HttpResponse:
        """GET: what a rotation does, and a button (POST) to confirm it. POST: rotate,
        audited, and answer with the new secret, this once (never stored elsewhere, never
        redirected to, never cached)."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        endpoint = WebhookEndpoint.objects.select_related("tenant").filter(pk=endpoint_id).first()
        if endpoint is None:
            raise Http404("no such webhook endpoint")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": endpoint,
            "title": "Rotate signing secret",
            "overlap": _duration(settings.WEBHOOK_PREVIOUS_SECRET_S),
        }
        if request.method == "GET":
            return TemplateResponse(request, ROTATE_TEMPLATE, context)
        try:
            rotated = webhook_secret_rotate(endpoint_id, actor=admin_actor(request))
        except AUDIT_UNAVAILABLE:
            context["error"] = NOT_RECORDED
            return TemplateResponse(request, ROTATE_TEMPLATE, context, status=503)
        if rotated is None:
            raise Http404("no such webhook endpoint")
        response = TemplateResponse(
            request,
            ROTATE_TEMPLATE,
            {
                **context,
                "title": "Signing secret rotated",
                "original": rotated,
                "secret": rotated.secret,
                "previous_until": clock.plain(rotated.previous_secret_until),
            },
        )
        patch_cache_control(response, no_store=True, private=True)
        return response
