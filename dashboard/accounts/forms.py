"""Forms of sign-in and of one's own account: the password with its second factor, the
authenticator's enrolment and replacement, a supervisor's reset of a colleague's second
factor, one's own password, the time zone pages show times in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from django import forms
from django.contrib.auth import password_validation
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError

from dashboard.accounts import mfa, passkeys
from dashboard.accounts.timezones import zone_names
from reconciliation.cases.policy import MAX_REASON_LENGTH, MIN_REASON_LENGTH, visible_length

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_otp.models import Device


class StaffSignInForm(AuthenticationForm):
    """Username, password and, where a second factor applies, ``otp_token`` (docs/design.md
    §8): the authenticator's six digits or a single-use recovery or enrolment code."""

    otp_token = forms.CharField(
        required=False,
        max_length=32,
        strip=True,
        label="Authenticator code",
        help_text="Supervisors and auditors: the 6 digits your authenticator app shows, "
        "or a recovery or enrolment code.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "spellcheck": "false"}),
    )
    # A passkey's answer to the sign-in page's challenge (dashboard/accounts/passkeys.py), in
    # place of the code: JSON the page's script puts here.
    passkey = forms.CharField(required=False, max_length=8192, widget=forms.HiddenInput)
    # One message for every failed sign-in (docs/security.md): which part was wrong —
    # the password, the code, a missing device — is never told, or the answer would
    # confirm a guessed password before the second factor is passed.
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Sign-in failed. Check your username and password and, if your "
        "account has a second factor, the code from your authenticator app (it changes "
        "every 30 seconds; a recovery or enrolment code works once). No second factor yet? "
        "Ask a supervisor to reset it: they will give you a one-time enrolment code.",
    }

    def clean(self) -> dict[str, Any]:
        # The password (after the lockout has counted this attempt: dashboard/accounts/lockout.py):
        # a wrong one raises invalid_login before any code is looked at.
        cleaned = super().clean()
        user = self.get_user()
        if user is None:
            return cleaned
        device = self._second_factor(
            user, cleaned.get("otp_token") or "", cleaned.get("passkey") or ""
        )
        if device is False:
            # The password was right and the second factor was not: the same answer as a
            # wrong password, and a failure axes records like one (toward the lockout).
            user_login_failed.send(
                sender=__name__,
                credentials={"username": user.get_username(), "stage": "second_factor"},
                request=self.request,
            )
            self.user_cache = None
            raise self.get_invalid_login_error()
        if device is not None:
            # django-otp's user_logged_in receiver keeps the device in the session, which
            # makes request.user.is_verified() true for the rest of it.
            user.otp_device = device  # type: ignore[attr-defined]  # django-otp's attribute
        return cleaned

    def _second_factor(
        self, user: User, token: str, passkey: str = ""
    ) -> Device | Literal[False] | None:
        """The device the code (or passkey) opened, None when none is needed, False when
        refused."""
        has_device = mfa.has_any_device(user)
        if not has_device and not mfa.mfa_required(user):
            return None  # no second factor: not required by the role, none enrolled
        if has_device and passkey and not token:
            return passkeys.sign_in_device(self.request, user, passkey) or False
        if not has_device or not token:
            return False
        try:
            return mfa.device_for_token(user, token) or False
        except mfa.SecondFactorRefused:
            return False  # throttled after wrong codes


class CodeForm(forms.Form):
    """A code from the authenticator app, to confirm an enrolment or a sensitive step."""

    otp_token = forms.CharField(
        max_length=32,
        label="Code from the app",
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "spellcheck": "false"}
        ),
    )


class OwnerProofForm(forms.Form):
    """Proof that the person is the account's owner, not only its session (a session
    alone may be stolen): the password and a code from a current device, the app or a
    recovery code (``mfa.owner_confirm`` checks them). ``code_label`` names the code as
    the page asks for it."""

    password = forms.CharField(
        label="Your password", strip=False, widget=forms.PasswordInput(render_value=False)
    )
    current_token = forms.CharField(
        max_length=32,
        label="Code from your app, or a recovery code",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "spellcheck": "false"}),
    )
    code_label = "Code from your app, or a recovery code"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["current_token"].label = self.code_label


class ReplaceAuthenticatorForm(CodeForm, OwnerProofForm):
    """Replacing an enrolled authenticator: the new app's code, and proof that the person
    is the owner, not only the session — the password and a code from the current app
    (or a recovery code)."""

    code_label = "Code from your current app, or a recovery code"
    field_order = ["otp_token", "password", "current_token"]


class ResetSecondFactorForm(OwnerProofForm):
    """A supervisor resets a colleague's second factor, saying why, and confirms it is
    them (not only their session) with their own password and current code."""

    reason_text = forms.CharField(
        label="Reason",
        min_length=MIN_REASON_LENGTH,
        max_length=MAX_REASON_LENGTH,
        widget=forms.TextInput(attrs={"placeholder": "e.g. phone lost, confirmed by call"}),
        help_text="Recorded in the audit trail.",
    )
    code_label = "Your code (app or recovery code)"
    field_order = ["reason_text", "password", "current_token"]

    def clean_reason_text(self) -> str:
        text: str = self.cleaned_data["reason_text"]
        if visible_length(text) < MIN_REASON_LENGTH:
            raise ValidationError(f"At least {MIN_REASON_LENGTH} visible characters.")
        return text


class SignOutForm(forms.Form):
    """Signing sessions out: the first post (the page's button) asks, and only the
    confirmation's post, which carries ``confirm``, acts. A plain form post, so it works
    without JavaScript, unlike a script's confirm dialog."""

    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    @property
    def confirmed(self) -> bool:
        return self.is_valid() and self.cleaned_data["confirm"]


class TimeZoneForm(forms.Form):
    """The zone one's pages show times in; only names this machine's zone database
    knows are accepted."""

    time_zone = forms.ChoiceField(label="Time zone", choices=())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["time_zone"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(name, name.replace("_", " ")) for name in zone_names()]


class PasswordChangeForm(forms.Form):
    """One's own password: the current one (checked by the service, under the lockout)
    and the new one twice, which Django's validators (``AUTH_PASSWORD_VALIDATORS``) must
    accept for this account."""

    current_password = forms.CharField(
        label="Current password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )
    new_password1 = forms.CharField(
        label="New password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    new_password2 = forms.CharField(
        label="New password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        self.user = user
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        new, again = cleaned.get("new_password1"), cleaned.get("new_password2")
        if new and again and new != again:
            self.add_error("new_password2", "The two new passwords differ.")
        elif new:
            try:
                password_validation.validate_password(new, self.user)
            except ValidationError as exc:
                self.add_error("new_password1", exc)
        return cleaned


class PasskeyRenameForm(forms.Form):
    """A passkey's name as its owner sees it on the profile: 1 to 64 characters (spaces
    around it dropped)."""

    name = forms.CharField(label="Name", max_length=64, strip=True)


class PasskeyRemoveForm(OwnerProofForm):
    """Removing a passkey: the password and a code from the app or a recovery code, as
    for replacing the authenticator (a session alone may be stolen)."""
