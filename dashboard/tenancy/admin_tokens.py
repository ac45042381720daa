"""The API token admin (docs/design.md §11): tokens are issued here as by
``issue_api_token`` (the new token is shown once, on the page that answers the form,
and only its hash and last characters are kept) and revoked (``revoked_at`` is set;
nothing is deleted). Registered on the admin site by dashboard/tenancy/admin.py importing it.

Split from dashboard/tenancy/admin.py (behaviour unchanged).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.utils.cache import patch_cache_control

from dashboard.accounts.views import AUDIT_UNAVAILABLE, NOT_RECORDED
from dashboard.tenancy.admin import TENANT_RE, AuditedAdmin, admin_actor, site
from dashboard.tenancy.models import ApiToken, ApiTokenQuerySet, Tenant
from dashboard.tenancy.tenant_changes import TooManyLiveTokens, token_issue, token_revoke


class TokenIssueForm(forms.Form):
    tenant = forms.RegexField(
        regex=TENANT_RE,
        max_length=64,
        help_text="An existing tenant, or a new one (created with the default funds).",
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        help_text="Days until the token expires; empty: never (until revoked).",
    )


class TokenStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> tuple[tuple[str, str], ...]:
        return (("active", "active"), ("expired", "expired"), ("revoked", "revoked"))

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[ApiToken]:
        # The changelist's queryset is ApiToken.objects', with its own methods.
        queryset = cast("ApiTokenQuerySet", queryset)
        if self.value() == "active":
            return queryset.live()
        if self.value() == "expired":
            return queryset.active().exclude(pk__in=queryset.live().values("pk"))
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken, site=site)
class ApiTokenAdmin(AuditedAdmin):
    list_display = (
        "tenant",
        "hint_text",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "status",
    )
    list_filter = (TokenStatusFilter, "tenant")
    search_fields = ("tenant", "hint")
    fields = list_display
    readonly_fields = fields
    actions = ("revoke_tokens",)

    @admin.display(description="token ends in")
    def hint_text(self, obj: ApiToken) -> str:
        return f"…{obj.hint}"

    @admin.display(description="status")
    def status(self, obj: ApiToken) -> str:
        return obj.state

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False  # a token is issued or revoked, never edited

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False  # revoked tokens stay, for the record

    def get_actions(
        self, request: HttpRequest
    ) -> dict[str, tuple[Callable[..., str], str, str] | None]:
        # Actions are offered only where the model may be changed; revoking is the one
        # change a token takes.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Revoke the selected API tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        actor = admin_actor(request)
        revoked = sum(token_revoke(token, actor=actor) for token in queryset.order_by("pk"))
        self.message_user(
            request,
            f"Revoked {revoked} token{pluralize(revoked)}: callers using "
            f"{pluralize(revoked, 'it,them')} are refused from now on."
            if revoked
            else "Nothing to revoke: the selected tokens were revoked already.",
            messages.SUCCESS if revoked else messages.WARNING,
        )

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Issue a token: the answer shows it this once (never stored, never redirected
        to, never kept in the session)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = TokenIssueForm(request.POST or None)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Issue an API token",
            "form": form,
            "tenants": Tenant.objects.values_list("name", flat=True),
        }
        if request.method == "POST" and form.is_valid():
            name = form.cleaned_data["tenant"]
            days = form.cleaned_data["expires_in_days"]
            try:
                token, raw = token_issue(
                    name,
                    actor=admin_actor(request),
                    expires_in=timedelta(days=days) if days else None,
                )
            except TooManyLiveTokens as exc:
                context["error"] = str(exc)
                return TemplateResponse(
                    request, "admin/tenancy/apitoken/issue.html", context, status=409
                )
            except AUDIT_UNAVAILABLE:
                context["error"] = NOT_RECORDED
                return TemplateResponse(
                    request, "admin/tenancy/apitoken/issue.html", context, status=503
                )
            response = TemplateResponse(
                request,
                "admin/tenancy/apitoken/issued.html",
                {**context, "title": "API token issued", "token": token, "raw": raw},
            )
            patch_cache_control(response, no_store=True, private=True)
            return response
        status = 400 if request.method == "POST" else 200
        return TemplateResponse(
            request, "admin/tenancy/apitoken/issue.html", context, status=status
        )
