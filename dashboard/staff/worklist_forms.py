"""The worklist's forms: its filters (a plain GET form, the URL holds them) and saving a
view (a name and the filters' query string, docs/worklist.md)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.http import QueryDict

from dashboard.staff.forms import (
    FundFilterField,
    IdPrefixedForm,
    age_filter_field,
    amount_filter_field,
)
from dashboard.staff.views.pages import QUEUE_SLUGS
from reconciliation.cases.vocabulary import CaseType, Queue
from reconciliation.casework.worklist import (
    ASSIGNEE_ME,
    SlaState,
    WorklistFilters,
    WorklistSort,
)

WORKLIST_FIELDS = (
    "queue",
    "case_type",
    "fund",
    "currency",
    "assignee",
    "min_age_h",
    "sla",
    "min_amount",
    "max_amount",
    "sort",
    "drill",
)
_USERNAME = re.compile(r"[\w.@+-]{1,150}")


class WorklistFilterForm(IdPrefixedForm):
    queue = forms.ChoiceField(
        required=False,
        choices=[("", "Every queue"), *((slug, q.label) for slug, q in QUEUE_SLUGS.items())],
        error_messages={"invalid_choice": "a queue of this dashboard"},
    )
    case_type = forms.ChoiceField(
        required=False,
        label="Case type",
        choices=[("", "Any type"), *((t.value, t.label) for t in CaseType)],
        error_messages={"invalid_choice": "a case type of this dashboard"},
    )
    fund = FundFilterField()
    currency = forms.CharField(
        required=False,
        max_length=3,
        label="Currency",
        widget=forms.TextInput(attrs={"placeholder": "e.g. GBP", "size": 4}),
    )
    assignee = forms.CharField(
        required=False,
        max_length=150,
        label="Assignee",
        help_text="A username, “me” or “unassigned”.",
        widget=forms.TextInput(attrs={"placeholder": "me, unassigned or a name"}),
    )
    min_age_h = age_filter_field()
    sla = forms.ChoiceField(
        required=False,
        label="SLA",
        choices=[("", "Any"), *((s.value, s.label) for s in SlaState)],
        error_messages={"invalid_choice": "an SLA state this page offers"},
    )
    min_amount = amount_filter_field("Amount from")
    max_amount = amount_filter_field("Amount up to")
    sort = forms.ChoiceField(
        required=False,
        label="Order",
        choices=[(s.value, s.label) for s in WorklistSort],
        error_messages={"invalid_choice": "an order this page offers (age, amount or sla)"},
    )
    drill = forms.BooleanField(required=False, label="Show drill data")
    prefix_id = "wl"

    def clean_currency(self) -> str:
        value: str = self.cleaned_data["currency"].strip().upper()
        if value and not re.fullmatch(r"[A-Z]{3}", value):
            raise forms.ValidationError("a three-letter currency code, e.g. GBP")
        return value

    def clean_assignee(self) -> str:
        value: str = self.cleaned_data["assignee"].strip()
        if value and not _USERNAME.fullmatch(value):
            raise forms.ValidationError("a username, “me” or “unassigned”")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        low, high = data.get("min_amount"), data.get("max_amount")
        if low is not None and high is not None and low > high:
            self.add_error("max_amount", "not less than “Amount from”")
        return data

    def filters(self, *, me: str) -> WorklistFilters:
        """The cleaned filters as the worklist read takes them (call after is_valid);
        "me" is ``me``, the signed-in person's username."""
        data = (self.cleaned_data or {}) if self.is_bound else {}
        hours = data.get("min_age_h")
        assignee = data.get("assignee", "")
        slug = data.get("queue", "")
        return WorklistFilters(
            queues=(Queue(QUEUE_SLUGS[slug]),) if slug else (),
            case_type=CaseType(data["case_type"]) if data.get("case_type") else None,
            fund=data.get("fund", ""),
            currency=data.get("currency", ""),
            assignee=me if assignee == ASSIGNEE_ME else assignee,
            min_age_s=None if hours is None else int(float(hours) * 3600),
            sla=SlaState(data["sla"]) if data.get("sla") else None,
            min_amount=data.get("min_amount"),
            max_amount=data.get("max_amount"),
            sort=WorklistSort(data.get("sort") or WorklistSort.AGE),
            drill=bool(data.get("drill")),
        )

    def query(self) -> str:
        """The filters as a query string (empty ones and the default order left out)."""
        if not (self.is_bound and self.is_valid()):
            return ""
        kept = []
        for name in WORKLIST_FIELDS:
            value = self.cleaned_data.get(name)
            if value in (None, "", False) or (name == "sort" and value == WorklistSort.AGE):
                continue
            kept.append((name, "1" if value is True else str(value)))
        return urlencode(kept)

    def shown(self) -> dict[str, str]:
        """The filters in force, for an audit event: name → value as typed."""
        return {k: str(v) for k, v in QueryDict(self.query()).items()}


def worklist_bound(data: QueryDict) -> WorklistFilterForm:
    """The filter form, bound when the URL names any filter."""
    return WorklistFilterForm(data if any(f in data for f in WORKLIST_FIELDS) else None)


class SavedViewForm(forms.Form):
    """A saved view: a name (1–80 characters) and the worklist's query string, which may
    hold only the worklist's filters with values the worklist accepts."""

    name = forms.CharField(min_length=1, max_length=80, label="Name this view", strip=True)
    query = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)

    def clean_query(self) -> str:
        raw = self.cleaned_data["query"].strip().lstrip("?")
        data = QueryDict(raw)
        unknown = sorted(k for k in data if k not in WORKLIST_FIELDS)
        if unknown:
            raise forms.ValidationError(f"not a worklist filter: {', '.join(unknown)}")
        if any(len(data.getlist(k)) > 1 for k in data):
            raise forms.ValidationError("each filter may appear once")
        filters = WorklistFilterForm(data)
        if not filters.is_valid():
            problems = "; ".join(
                f"{k}: {' '.join(str(e) for e in v)}" for k, v in filters.errors.items()
            )
            raise forms.ValidationError(f"the filters are not valid ({problems})")
        return filters.query()
