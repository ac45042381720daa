"""The administration screen at ``/admin/`` (docs/design.md §11): staff and their roles,
tenants, their funds and API tokens, for superusers only.

Sign-in is the staff sign-in (``/accounts/login/``, with its second factor): the admin's
own login form, which knows no second factor, is never served. Every change made here
is an audit event, appended inside the database transaction that makes the change, so a
change the audit trail refused is rolled back and the page says so: staff accounts on
their ``STAFF#username`` stream, tenants, funds and tokens on ``TENANT#name``.

API tokens (dashboard/tenancy/admin_tokens.py, registered on ``site`` by the import at the end
of this module) are issued as by ``issue_api_token`` and revoked, never deleted; nothing
here deletes a tenant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.contrib.auth.models import Group
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import ManyToManyField, QuerySet
from django.forms import BaseFormSet, ModelMultipleChoiceField
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import reverse

from dashboard.accounts import passwords, staff_sessions
from dashboard.accounts.events import account_event_append
from dashboard.accounts.views import AUDIT_UNAVAILABLE, NOT_RECORDED
from dashboard.auth import actor_for_user, forget_role
from dashboard.tenancy.models import ApiToken, Fund, Tenant
from dashboard.tenancy.tenant_changes import (
    fund_remove,
    fund_snapshot,
    tenant_event,
    tenant_provision,
)
from reconciliation.actors import STAFF_ROLES, Actor, Role, staff_role
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.claims import funds as fund_rules

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry
    from django.contrib.admin.options import InlineModelAdmin
    from django.contrib.auth.models import User

TENANT_RE = r"^[A-Za-z0-9_.-]{1,64}$"

_View = TypeVar("_View", bound=Callable[..., HttpResponseBase])


class SuperuserAdminSite(admin.AdminSite):
    site_header = "Pledge reconciliation: administration"
    site_title = "Administration"
    index_title = "Staff, tenants, funds and API tokens"
    site_url = "/"

    def has_permission(self, request: HttpRequest) -> bool:
        """Superusers only: finance staff, supervisors and auditors never get in."""
        user = request.user
        return bool(user.is_active and user.is_superuser)

    def admin_view(self, view: _View, cacheable: bool = False) -> _View:
        """Anonymous: to the staff sign-in; signed in without the right: 403 (the admin
        would send both to its own login form)."""
        inner = super().admin_view(view, cacheable)

        @functools.wraps(view)
        def gate(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not self.has_permission(request):
                if request.user.is_authenticated:
                    raise PermissionDenied
                return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
            return inner(request, *args, **kwargs)

        return cast(_View, gate)  # functools.wraps: it is called as ``view`` is

    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The staff sign-in, with its second factor, instead of the admin's own form;
        a signed-in person who is not a superuser is refused outright."""
        if request.user.is_authenticated:
            raise PermissionDenied
        return redirect_to_login(
            request.GET.get("next") or reverse("admin:index"), settings.LOGIN_URL
        )


site = SuperuserAdminSite(name="admin")


def admin_actor(request: HttpRequest) -> Actor:
    """The superuser on the admin site: whatever their groups, they act as ADMIN."""
    return actor_for_user(request, request.user, role=Role.ADMIN)


# Django's ModelAdmin, TabularInline, ModelForm, UserChangeForm and UserAdmin are generic
# in django-stubs only: subscripted as base classes they fail at run time, so they are
# left bare (``ModelAdmin[Any]`` to mypy) and the object each method takes is typed.
class AuditedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic in django-stubs only
    """Every view that changes something answers a refused audit append with a page that
    says nothing was changed (the transaction is rolled back), never a 500."""

    def _guarded(
        self, view: Callable[..., HttpResponse], request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        try:
            with transaction.atomic():
                return view(request, *args, **kwargs)
        except AUDIT_UNAVAILABLE:
            return TemplateResponse(
                request,
                "admin/audit_unavailable.html",
                {**self.admin_site.each_context(request), "message": NOT_RECORDED},
                status=503,
            )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return self._guarded(super().changeform_view, request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._guarded(super().delete_view, request, object_id, extra_context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._guarded(super().changelist_view, request, extra_context)


# --- tenants and funds ------------------------------------------------------------------


def _tenant_event(
    request: HttpRequest, tenant: str, action: AuditAction, **fields: dict[str, Any] | None
) -> None:
    tenant_event(tenant, action, actor=admin_actor(request), **fields)


class FundInline(admin.TabularInline):  # type: ignore[type-arg]  # generic in django-stubs only
    """A tenant's funds, read here; added and changed on the Funds page."""

    model = Fund
    fields = ("code", "currency", "max_amount")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True


class TenantForm(forms.ModelForm):  # type: ignore[type-arg]  # generic in django-stubs only
    name = forms.RegexField(
        regex=TENANT_RE,
        max_length=64,
        help_text="1-64 letters, digits, '.', '_' or '-': the name API tokens carry.",
    )

    class Meta:
        model = Tenant
        fields = ("name",)


@admin.register(Tenant, site=site)
class TenantAdmin(AuditedAdmin):
    form = TenantForm
    list_display = ("name", "fund_list", "active_tokens", "intake_limit", "created_at")
    search_fields = ("name",)
    readonly_fields = ("created_at",)
    inlines = (FundInline,)

    def get_readonly_fields(
        self, request: HttpRequest, obj: Tenant | None = None
    ) -> tuple[str, ...]:
        return ("name", "created_at") if obj else ("created_at",)

    def get_inlines(
        self, request: HttpRequest, obj: Tenant | None
    ) -> tuple[type[InlineModelAdmin[Any, Any]], ...]:
        return self.inlines if obj else ()

    @admin.display(description="funds")
    def fund_list(self, obj: Tenant) -> str:
        return ", ".join(f"{f.code} {f.currency}" for f in obj.funds.all())

    @admin.display(description="intake limit")
    def intake_limit(self, obj: Tenant) -> str:
        """As ``set_intake_limit`` sets it; empty fields fall back to the settings."""
        rate = obj.intake_rate_per_s
        burst = obj.intake_burst
        if rate is None and burst is None:
            return f"default ({settings.INTAKE_RATE_PER_S:g}/s, burst {settings.INTAKE_BURST})"
        return f"{rate if rate is not None else settings.INTAKE_RATE_PER_S:g}/s, burst " + str(
            burst if burst is not None else settings.INTAKE_BURST
        )

    @admin.display(description="live API tokens")
    def active_tokens(self, obj: Tenant) -> int:
        return ApiToken.objects.live().filter(tenant=obj.name).count()

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return False  # tokens and audit streams name the tenant: it stays

    def save_model(self, request: HttpRequest, obj: Tenant, form: TenantForm, change: bool) -> None:
        if change:
            return  # the name is read-only; nothing else to change
        tenant = tenant_provision(obj.name, actor=admin_actor(request))
        obj.pk, obj.created_at = tenant.pk, tenant.created_at
        obj._state.adding = False


class FundForm(forms.ModelForm):  # type: ignore[type-arg]  # generic in django-stubs only
    class Meta:
        model = Fund
        fields = ("tenant", "code", "currency", "max_amount")
        help_texts = {
            "code": "1-32 letters, digits, '_' or '-' (upper-cased), as clients send it.",
            "currency": "ISO 4217 code; the same fund in another currency is another row.",
            "max_amount": "The largest single pledge intake accepts, in the currency's "
            "major units and minor units (0 places for JPY, 3 for BHD).",
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        code = cleaned.get("code", self.instance.code or "")
        currency = cleaned.get("currency", self.instance.currency or "")
        max_amount = cleaned.get("max_amount")
        if max_amount is None:
            return cleaned
        try:
            fund = fund_rules.fund_parse(code, currency, max_amount)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        cleaned.update(code=fund.code, currency=fund.currency)
        if "code" in self.fields:
            self.instance.code, self.instance.currency = fund.code, fund.currency
        return cleaned


@admin.register(Fund, site=site)
class FundAdmin(AuditedAdmin):
    form = FundForm
    list_display = ("tenant", "code", "currency", "largest_single_amount", "created_at")
    list_filter = ("tenant", "currency")
    search_fields = ("tenant__name", "code")
    list_select_related = ("tenant",)

    @admin.display(description="largest single amount", ordering="max_amount")
    def largest_single_amount(self, obj: Fund) -> str:
        return obj.as_rule().max_amount_text

    def get_readonly_fields(self, request: HttpRequest, obj: Fund | None = None) -> tuple[str, ...]:
        # Only the limit changes: another code or currency is another fund (another
        # ledger), registered as such.
        return ("tenant", "code", "currency", "created_at") if obj else ("created_at",)

    def save_model(self, request: HttpRequest, obj: Fund, form: FundForm, change: bool) -> None:
        if change:
            before = Fund.objects.get(pk=obj.pk)
            if before.max_amount != obj.max_amount:
                _tenant_event(
                    request,
                    obj.tenant.name,
                    AuditAction.FUND_LIMIT_CHANGED,
                    before=fund_snapshot(before),
                    after=fund_snapshot(obj),
                )
        else:
            _tenant_event(
                request, obj.tenant.name, AuditAction.FUND_REGISTERED, after=fund_snapshot(obj)
            )
        super().save_model(request, obj, form, change)

    def delete_model(self, request: HttpRequest, obj: Fund) -> None:
        fund_remove(obj, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Fund]) -> None:
        for fund in queryset.select_related("tenant"):
            self.delete_model(request, fund)


# --- staff ---------------------------------------------------------------------------------

ROLE_NAMES = [str(r) for r in STAFF_ROLES]


class StaffChangeForm(UserChangeForm):  # type: ignore[type-arg]  # generic in django-stubs only
    def clean_groups(self) -> QuerySet[Group] | None:
        groups = self.cleaned_data.get("groups")
        if groups is not None and groups.count() > 1:
            raise forms.ValidationError("A staff member has one role: choose one group.")
        return groups


def _staff_snapshot(user: User) -> dict[str, str | bool]:
    forget_role(user)  # its groups may have changed in this request
    names = set(user.groups.values_list("name", flat=True)) if user.pk else set()
    return {
        "role": str(staff_role(names) or ""),
        "active": bool(user.is_active),
        "superuser": bool(user.is_superuser),
        "email": user.email or "",
    }


class StaffAdmin(AuditedAdmin, UserAdmin):  # type: ignore[type-arg]  # generic in django-stubs only
    form = StaffChangeForm
    list_display = ("username", "email", "role", "is_active", "is_superuser", "last_login")
    list_filter = ("is_active", "is_superuser", "groups")
    fieldsets = (
        (None, {"fields": ("username", "password")}),
        ("Person", {"fields": ("first_name", "last_name", "email")}),
        (
            "Access",
            {
                "fields": ("is_active", "groups", "is_superuser"),
                "description": "The group is the person's role (finance_staff, supervisor, "
                "auditor). Superusers reach this administration screen.",
            },
        ),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    readonly_fields = ("last_login", "date_joined")
    filter_horizontal = ()

    @admin.display(description="role")
    def role(self, obj: User) -> str:
        return str(staff_role(g.name for g in obj.groups.all()) or "–")

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        return super().get_queryset(request).prefetch_related("groups")

    def formfield_for_manytomany(
        self, db_field: ManyToManyField[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelMultipleChoiceField[Any] | None:
        if db_field.name == "groups":
            for name in ROLE_NAMES:
                Group.objects.get_or_create(name=name)
            kwargs["queryset"] = Group.objects.filter(name__in=ROLE_NAMES)
            kwargs["widget"] = forms.CheckboxSelectMultiple
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: User, form: StaffChangeForm, change: bool
    ) -> None:
        if change:
            # Read back in save_related, once the groups are saved too.
            request._staff_before = _staff_snapshot(type(obj).objects.get(pk=obj.pk))  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def save_related(
        self,
        request: HttpRequest,
        form: StaffChangeForm,
        formsets: list[BaseFormSet[Any]],
        change: bool,
    ) -> None:
        super().save_related(request, form, formsets, change)
        user = form.instance
        after = _staff_snapshot(user)
        before = getattr(request, "_staff_before", None)
        if not change:
            action = AuditAction.STAFF_CREATED
        elif before == after:
            return
        elif before and before["role"] != after["role"]:
            action = AuditAction.STAFF_ROLE_CHANGED
        else:
            action = AuditAction.STAFF_CHANGED
        account_event_append(
            user,
            AuditEvent(
                action=action,
                actor=admin_actor(request),
                before=before if change else None,
                after=after,
            ),
        )

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        before = request.session.session_key
        response = self._guarded(super().user_change_password, request, id, form_url)
        # One's own password: Django keeps this session under a new key; its row follows.
        staff_sessions.session_rekeyed(before, request.session.session_key)
        return response

    def log_change(
        self, request: HttpRequest, obj: User, message: str | list[dict[str, Any]]
    ) -> LogEntry:
        if request.path.rstrip("/").endswith("/password"):
            # Django's form has set it; the event, the sessions it ends and the e-mail
            # are the same as every other way a password is set (accounts/passwords.py).
            own = obj.pk == request.user.pk
            passwords.password_set(
                obj,
                new_password=None,
                actor=admin_actor(request),
                keep_session=request.session.session_key if own else None,
                via="admin",
            )
        return super().log_change(request, obj, message)

    def delete_model(self, request: HttpRequest, obj: User) -> None:
        account_event_append(
            obj,
            AuditEvent(
                action=AuditAction.STAFF_DELETED,
                actor=admin_actor(request),
                before=_staff_snapshot(obj),
            ),
        )
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        for user in queryset:
            self.delete_model(request, user)


site.register(get_user_model(), StaffAdmin)

# The API token and webhook admins register themselves on ``site`` when imported.
from dashboard.tenancy import admin_tokens, admin_webhooks  # noqa: E402, F401
