"""The forms of an endpoint's Deliveries page (docs/webhooks.md): its attempts' filters
(a GET form: the URL holds them), and the bulk resend's two steps: the window to preview,
then the confirm that carries what the preview read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core import signing

from dashboard.staff.forms import IdPrefixedForm, _ReasonForm
from dashboard.tenancy.delivery_log import AttemptFilters, AttemptOutcome
from reconciliation.acks.models import DeliveryStatus, EventType
from reconciliation.acks.redeliver import RedeliverSeen
from reconciliation.acks.resend import ResendItem

# A preview confirms within this long, or is previewed again: what it read ages.
PREVIEW_VALID_S = 15 * 60
_SALT = "dashboard.acks.resend"
_LOCAL_INPUT = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")


def _utc(value: datetime | None) -> datetime | None:
    """Entered times are UTC (the page says so), whatever the server's zone."""
    return None if value is None else value.replace(tzinfo=UTC)


class AttemptFilterForm(IdPrefixedForm):
    prefix_id = "attempts"
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "Any outcome"), ("failed", "Failed"), ("succeeded", "Answered 2xx")],
        error_messages={"invalid_choice": "failed or succeeded"},
    )
    event_type = forms.ChoiceField(
        required=False,
        label="Event",
        choices=[("", "Any event"), *((e.value, e.label) for e in EventType)],
        error_messages={"invalid_choice": "an event type of this dashboard"},
    )
    key = forms.CharField(
        required=False,
        max_length=255,
        label="Client's key",
        widget=forms.TextInput(attrs={"placeholder": "one pledge", "size": 16}),
    )
    since = forms.DateTimeField(required=False, label="From (UTC)", widget=_LOCAL_INPUT)
    until = forms.DateTimeField(required=False, label="Until (UTC)", widget=_LOCAL_INPUT)

    def clean_key(self) -> str:
        key = self.cleaned_data.get("key") or ""
        # A client's key is printable (docs/design.md §4): any other matches no pledge,
        # and saying so beats an empty list.
        if not key.isprintable():
            raise forms.ValidationError("printable characters only, as in a client's key")
        return key

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and until <= since:
            self.add_error("until", "after From")
        return data

    def filters(self) -> AttemptFilters:
        data = self.cleaned_data
        return AttemptFilters(
            outcome=AttemptOutcome(data["outcome"]) if data.get("outcome") else None,
            event_type=EventType(data["event_type"]) if data.get("event_type") else None,
            client_key=data.get("key") or "",
            since=_utc(data.get("since")),
            until=_utc(data.get("until")),
        )

    def shown(self) -> dict[str, str]:
        """The filters as set, for the URL of the next page, the CSV and its audit event."""
        return {k: str(v) for k, v in self.data.items() if k in self.fields and v}


class ResendPreviewForm(IdPrefixedForm):
    """Step one: since when; the answer lists what a confirm would resend."""

    prefix_id = "resend"
    since = forms.DateTimeField(label="Failed since (UTC)", widget=_LOCAL_INPUT)

    def since_utc(self) -> datetime:
        since = _utc(self.cleaned_data["since"])
        assert since is not None  # required
        return since


class ResendConfirmForm(_ReasonForm):
    """Step two: the preview's items, signed so the confirm resends exactly what was
    previewed (and a page older than ``PREVIEW_VALID_S`` is previewed again), and the
    reason every resend is audited with."""

    prefix_id = "resend_confirm"
    preview = forms.CharField(widget=forms.HiddenInput)
    field_order = ["reason_code", "reason_text"]

    @staticmethod
    def sign(endpoint_pk: int, items: tuple[ResendItem, ...]) -> str:
        packed = [
            [i.intent_id, i.seen.key, i.seen.attempts, i.seen.status, i.seen.audit_seq]
            for i in items
        ]
        return signing.dumps([endpoint_pk, packed], salt=_SALT, compress=True)

    def items_for(self, endpoint_pk: int) -> tuple[ResendItem, ...]:
        """The previewed items, for the endpoint whose page this is; a ValidationError
        for a preview that is not this page's own or is too old."""
        try:
            pk, packed = signing.loads(
                self.cleaned_data["preview"], salt=_SALT, max_age=PREVIEW_VALID_S
            )
        except signing.SignatureExpired as exc:
            raise forms.ValidationError("The preview is too old: preview again.") from exc
        except (signing.BadSignature, ValueError, TypeError) as exc:
            raise forms.ValidationError("Not a preview of this page: preview again.") from exc
        if pk != endpoint_pk:
            raise forms.ValidationError("Not a preview of this endpoint: preview again.")
        return tuple(
            ResendItem(
                intent_id, RedeliverSeen(key, attempts, DeliveryStatus.read(status), audit_seq)
            )
            for intent_id, key, attempts, status, audit_seq in packed
        )
