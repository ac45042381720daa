"""Forms of the staff screens. They shape input and label controls; the services decide
what is allowed (the choices offered come from ``reconciliation.cases.policy``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib.auth.models import User

from dashboard.tenancy.models import Tenant
from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import StaffAction
from reconciliation.cases.policy import (
    BULK_DISPOSITIONS,
    CASE_ACTIONS,
    DISPOSITIONS,
    LABELS,
    MAX_REASON_LENGTH,
    MIN_REASON_LENGTH,
    OVERRIDES,
    REASON_CODES,
)
from reconciliation.cases.vocabulary import (
    CaseAction,
    Disposition,
    Override,
    ReasonCode,
    case_action,
)
from reconciliation.casework.notes import MAX_NOTE_LENGTH
from reconciliation.casework.selectors import DEFAULT_SORT, SORT_WORDS, QueueFilters
from reconciliation.claims.funds import fund_parse

if TYPE_CHECKING:
    from django.forms import BoundField

    from dashboard.staff.views.cases import Withheld

REASON_CHOICES = [("", "Choose a reason…"), *REASON_CODES.items()]


def new_action_id() -> str:
    """A fresh id per rendered form: submitting the same form twice applies it once."""
    return str(uuid.uuid4())


def fund_filter(value: str) -> str:
    """A fund typed into a list's filter, as funds are stored: upper case, letters,
    digits, '_' or '-', at most 32; empty for none."""
    value = value.strip().upper()
    if value and (len(value) > 32 or not value.replace("_", "").replace("-", "").isalnum()):
        raise forms.ValidationError("letters, digits, '_' or '-' (up to 32)")
    return value


class FundFilterField(forms.CharField):
    """A list's filter by fund: optional, cleaned by :func:`fund_filter`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, max_length=32, label="Fund", **kwargs)

    def clean(self, value: str | None) -> str:
        return fund_filter(super().clean(value))


def decimal_filter_field(
    label: str, *, max_value: Decimal | int, max_digits: int, error: str, placeholder: str
) -> forms.DecimalField:
    """An optional number from 0 typed into a list's filter. Bounded, range and places:
    "1E-200" is a valid Decimal that DynamoDB's number context cannot hold (Underflow)."""
    return forms.DecimalField(
        required=False,
        min_value=0,
        max_value=max_value,
        max_digits=max_digits,
        decimal_places=2,
        label=label,
        error_messages={"invalid": error, "min_value": error},
        widget=forms.TextInput(attrs={"inputmode": "decimal", "placeholder": placeholder}),
    )


def amount_filter_field(label: str) -> forms.DecimalField:
    return decimal_filter_field(
        label,
        max_value=Decimal("999999999999.99"),
        max_digits=14,
        error="a non-negative number",
        placeholder="e.g. 100",
    )


def age_filter_field() -> forms.DecimalField:
    return decimal_filter_field(
        "Minimum age (hours)",
        max_value=24 * 3650,
        max_digits=8,
        error="hours, a number from 0",
        placeholder="e.g. 4",
    )


class IdPrefixedForm(forms.Form):
    """A form whose element ids start with ``prefix_id`` (or the ``prefix_id`` given):
    several forms share one page, and an id must be unique on it."""

    prefix_id: str

    def __init__(self, *args: Any, prefix_id: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", f"{prefix_id or self.prefix_id}_%s")
        super().__init__(*args, **kwargs)


class DrillForm(IdPrefixedForm):
    """A list with no filters of its own but "Show drill data" (the approvals)."""

    drill = forms.BooleanField(required=False, label="Show drill data")
    prefix_id = "list"


class QueueFilterForm(IdPrefixedForm):
    """Filters of a queue page; a plain GET form that htmx also submits in place."""

    fund = FundFilterField()
    min_amount = amount_filter_field("Minimum amount")
    min_age_h = age_filter_field()
    q = forms.CharField(
        required=False,
        max_length=600,
        label="Intent id",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "tenant#key, e.g. acme#42"}),
    )
    mine = forms.BooleanField(required=False, label="Assigned to me")
    drill = forms.BooleanField(required=False, label="Show drill data")
    prefix_id = "filter"
    sort = forms.ChoiceField(
        required=False,
        choices=list(SORT_WORDS.items()),
        widget=forms.HiddenInput,
        error_messages={"invalid_choice": "an order this page offers (age, amount or fund)"},
    )

    def filters(self, *, assignee: str = "") -> QueueFilters:
        """The cleaned filters as the queue read takes them (call after is_valid)."""
        data = self.cleaned_data if self.is_bound else {}
        hours = data.get("min_age_h")
        return QueueFilters(
            fund=data.get("fund", ""),
            min_amount=data.get("min_amount"),
            min_age_s=None if hours is None else int(float(hours) * 3600),
            assignee=assignee if data.get("mine") else "",
            sort=data.get("sort") or DEFAULT_SORT,
            drill=bool(data.get("drill")),
        )

    def clean_q(self) -> str:
        value: str = self.cleaned_data["q"].strip()
        if value and "#" not in value:
            raise forms.ValidationError("Enter the intent id as tenant#key, e.g. acme#42.")
        return value


class _ReasonForm(IdPrefixedForm):
    reason_code = forms.TypedChoiceField(
        choices=REASON_CHOICES, coerce=ReasonCode, label="Reason code"
    )
    reason_text = forms.CharField(
        label="Reason",
        min_length=MIN_REASON_LENGTH,
        max_length=MAX_REASON_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"At least {MIN_REASON_LENGTH} characters; recorded in the audit trail.",
    )
    action_id = forms.CharField(widget=forms.HiddenInput, max_length=64)
    # The prefix of the form's element ids: several reason forms share one page.
    prefix_id = "reason"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        initial = kwargs.setdefault("initial", {})
        initial.setdefault("action_id", new_action_id())
        super().__init__(*args, **kwargs)


class _ChoiceReasonForm(_ReasonForm):
    """A reasoned action with one radio choice."""

    choice_field: str
    seen_version = forms.IntegerField(widget=forms.HiddenInput, min_value=0)

    @property
    def choice(self) -> BoundField:
        """The bound radio field, whichever the form names it."""
        return self[self.choice_field]

    # Actions the evidence rules out, shown disabled with their reason (views/cases.py).
    withheld: list[Withheld] = []

    def offer(self, offered: list[CaseAction]) -> None:
        """Show only these choices, in this order (what the role may do on the case now)."""
        field = self.fields[self.choice_field]
        if not isinstance(field, forms.ChoiceField):
            raise TypeError(f"{type(self).__name__}.{self.choice_field} is not a choice field")
        field.choices = [(o, LABELS[o]) for o in offered]


class DispositionForm(_ChoiceReasonForm):
    choice_field = "disposition"
    disposition = forms.TypedChoiceField(
        choices=[(d, LABELS[d]) for d in DISPOSITIONS],
        coerce=Disposition,
        widget=forms.RadioSelect,
        label="Disposition",
    )
    field_order = ["disposition", "reason_code", "reason_text"]
    prefix_id = "dispose"


class OverrideRequestForm(_ChoiceReasonForm):
    choice_field = "override"
    override = forms.TypedChoiceField(
        choices=[(o, LABELS[o]) for o in OVERRIDES],
        coerce=Override,
        widget=forms.RadioSelect,
        label="Override",
    )
    field_order = ["override", "reason_code", "reason_text"]
    prefix_id = "override"


def assignable_staff() -> list[str]:
    """Usernames a supervisor may assign a case to: active finance staff and
    supervisors (auditors are read-only)."""
    return list(
        User.objects.filter(is_active=True, groups__name__in=(Role.FINANCE_STAFF, Role.SUPERVISOR))
        .order_by("username")
        .values_list("username", flat=True)
        .distinct()
    )


class AssignForm(IdPrefixedForm):
    """Take a case, release it, or (``staff`` given: a supervisor) assign it to anyone
    on the staff list; a name off the list is refused here, before any write."""

    seen_version = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    action_id = forms.CharField(widget=forms.HiddenInput, max_length=64)
    unassign = forms.BooleanField(required=False, widget=forms.HiddenInput)
    assignee = forms.ChoiceField(required=False, choices=(), label="Assign to")
    prefix_id = "assign"

    def __init__(self, *args: Any, staff: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("action_id", new_action_id())
        super().__init__(*args, **kwargs)
        names = assignable_staff() if staff is None else staff
        field = self.fields["assignee"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "Choose a person…"), *((n, n) for n in names)]
        field.error_messages["invalid_choice"] = "not an active finance staff member or supervisor"


class NoteForm(IdPrefixedForm):
    """A note on a case: free text, stripped; the service decides what it accepts
    (reconciliation/casework/notes.py), the form only shapes the box."""

    text = forms.CharField(
        label="Add a note",
        required=False,  # empty is refused by the service, in its words, writing nothing
        strip=True,
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "maxlength": MAX_NOTE_LENGTH,
                "placeholder": "@name notifies a colleague",
            }
        ),
    )
    # The page's form sends one so a double submission adds the note once; a POST
    # with ``text`` alone is a note too.
    action_id = forms.CharField(widget=forms.HiddenInput, max_length=64, required=False)
    prefix_id = "note"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("action_id", new_action_id())
        super().__init__(*args, **kwargs)


class DecisionForm(_ReasonForm):
    """Approve or reject one pending override request, with a note."""

    request_id = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args: Any, case_id: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("prefix_id", f"decide_{case_id}")
        super().__init__(*args, **kwargs)
        self.fields["reason_text"].label = "Note"


class RedeliverForm(_ReasonForm):
    """Send one acknowledgement delivery again, now; what the page showed of it rides
    along, and the change is conditioned on it (reconciliation/acks/redeliver.py)."""

    tenant = forms.CharField(widget=forms.HiddenInput, max_length=64)
    key = forms.CharField(widget=forms.HiddenInput, max_length=255)
    delivery = forms.CharField(widget=forms.HiddenInput, max_length=300)
    seen_attempts = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    seen_status = forms.CharField(widget=forms.HiddenInput, max_length=32)
    seen_audit_seq = forms.IntegerField(widget=forms.HiddenInput, min_value=0)

    def __init__(self, *args: Any, index: int = 0, **kwargs: Any) -> None:
        kwargs.setdefault("prefix_id", f"redeliver_{index}")
        super().__init__(*args, **kwargs)


class BulkForm(_ReasonForm):
    disposition = forms.TypedChoiceField(
        choices=[(d, LABELS[d]) for d in BULK_DISPOSITIONS],
        coerce=Disposition,
        label="Apply to the selected cases",
    )
    step = forms.ChoiceField(choices=[("preview", "Preview"), ("apply", "Apply")])
    queue = forms.CharField(required=False, max_length=20, widget=forms.HiddenInput)
    field_order = ["disposition", "reason_code", "reason_text"]
    prefix_id = "bulk"

    def __init__(
        self, *args: Any, offered: Sequence[Disposition] | None = None, **kwargs: Any
    ) -> None:
        """``offered``: the dispositions the page's menu lists (those some listed case
        allows); every bulk disposition when not given, as when checking a POST (each
        case is checked by the service)."""
        super().__init__(*args, **kwargs)
        if offered is not None:
            field = cast(forms.ChoiceField, self.fields["disposition"])
            field.choices = [(d, LABELS[d]) for d in BULK_DISPOSITIONS if d in offered]


class CaseSearchForm(IdPrefixedForm):
    """The case search (``/cases/?q=``): one box for what a person was told."""

    q = forms.CharField(
        required=False,
        max_length=255,
        strip=True,
        label="Find a case",
        error_messages={"max_length": "At most %(limit_value)d characters."},
        widget=forms.TextInput(
            attrs={"type": "search", "placeholder": "case id, client's key or donor ref"}
        ),
    )
    drill = forms.BooleanField(required=False, label="Show drill data")

    prefix_id = "search"

    def clean_q(self) -> str:
        value: str = self.cleaned_data["q"]
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise forms.ValidationError("Printable characters only, on one line.")
        return value


# What resolved a case: the dispositions and overrides that resolve (not ESCALATE, not
# REOPEN), labelled.
RESOLVED_HOW = [
    (code, LABELS[code])
    for code in CASE_ACTIONS
    if code not in (Disposition.ESCALATE, Override.REOPEN)
]


class ResolvedFilterForm(IdPrefixedForm):
    """Filters of ``/queues/resolved/``: who, how, fund and a range of UTC days."""

    resolved_by = forms.CharField(required=False, max_length=150, label="Resolved by")
    how = forms.TypedChoiceField(
        required=False,
        choices=[("", "Any way"), *RESOLVED_HOW],
        coerce=case_action,
        empty_value="",
        label="How",
    )
    fund = FundFilterField()
    since = forms.DateField(
        required=False,
        label="From (UTC day)",
        widget=forms.DateInput(attrs={"type": "date"}),
        error_messages={"invalid": "a date, e.g. 2026-12-01"},
    )
    until = forms.DateField(
        required=False,
        label="To (UTC day)",
        widget=forms.DateInput(attrs={"type": "date"}),
        error_messages={"invalid": "a date, e.g. 2026-12-01"},
    )
    drill = forms.BooleanField(required=False, label="Show drill data")

    prefix_id = "resolved"

    def clean_resolved_by(self) -> str:
        resolved_by: str = self.cleaned_data["resolved_by"]
        return resolved_by.strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        for name, day in (("since", since), ("until", until)):
            # The list is kept from 2000 on; beyond 9998 the next day does not exist.
            if day and not 2000 <= day.year <= 9998:
                self.add_error(name, "a day between the years 2000 and 9998")
        if since and until and since > until:
            self.add_error("until", "on or after the first day")
        return data


def staff_action(data: Mapping[str, Any], actor: Actor) -> StaffAction:
    """What an action passes on from its form's cleaned data: who acts, the reason (none
    on an assignment), the version the person saw (none on a decision or a bulk action,
    which act on the version they read) and the action id."""
    return StaffAction(
        actor=actor,
        reason_code=data.get("reason_code"),
        reason_text=data.get("reason_text"),
        seen_version=data.get("seen_version"),
        action_id=data["action_id"],
    )


class RejectedRequestsForm(IdPrefixedForm):
    """The refused intake requests of a tenant (``/requests/rejected/``): which tenant,
    which UTC day (today when left empty)."""

    prefix_id = "rejected"
    tenant = forms.ChoiceField(label="Tenant")
    day = forms.DateField(
        required=False,
        label="Day (UTC)",
        widget=forms.DateInput(attrs={"type": "date"}),
        error_messages={"invalid": "A day as YYYY-MM-DD."},
    )

    def __init__(self, *args: Any, tenants: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(t, t) for t in tenants]
        field.error_messages["invalid_choice"] = "not a known tenant"

    def clean_day(self) -> date:
        day = self.cleaned_data.get("day")
        return day or clock.now().date()


class FundForm(IdPrefixedForm):
    """A tenant's fund in one currency and its largest single amount (the Funds page),
    checked by the rules ``add_fund`` uses (``fund_parse``)."""

    prefix_id = "fund"
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.order_by("name"), to_field_name="name", empty_label=None
    )
    code = forms.CharField(max_length=32, label="Fund code")
    currency = forms.CharField(max_length=3, label="Currency (ISO 4217)")
    max_amount = forms.CharField(max_length=40, label="Largest single amount")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["fund"] = fund_parse(data["code"], data["currency"], data["max_amount"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data
