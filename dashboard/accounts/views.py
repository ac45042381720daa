"""One's own account (profile: the second factor, recovery codes) and, for supervisors,
the staff list where a colleague's second factor is reset. Codes and recovery codes are
shown once, in the answer to the POST that made them, and never stored readable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.contrib.auth import get_user_model, update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group, User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render, resolve_url
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe
from django_otp import login as otp_login

from dashboard.accounts import mfa, passkeys, passwords, staff_sessions, timezones
from dashboard.accounts.forms import (
    CodeForm,
    PasskeyRemoveForm,
    PasskeyRenameForm,
    PasswordChangeForm,
    ReplaceAuthenticatorForm,
    ResetSecondFactorForm,
    SignOutForm,
    StaffSignInForm,
    TimeZoneForm,
)
from dashboard.auth import StaffRequest, actor_for, role_required, user_role
from reconciliation.actors import STAFF_ROLES, Role
from reconciliation.audit.append import AuditAppendContended

AUDIT_UNAVAILABLE = (BotoCoreError, ClientError, AuditAppendContended)
NOT_RECORDED = "The audit trail could not be written just now, so nothing was changed. Try again."


def _ended_sentence(ended: int) -> str:
    were = pluralize(ended, "was,were")
    return f"{ended} other session{pluralize(ended)} of your account {were} signed out."


class StaffLoginView(auth_views.LoginView):
    """Sign-in (``/accounts/login/``): ``?next=`` when given, else each role's first page.
    Finance staff run the day from the worklist; supervisors and auditors land on the
    overview (``LOGIN_REDIRECT_URL``)."""

    authentication_form = StaffSignInForm

    def get_default_redirect_url(self) -> str:
        if user_role(self.request.user) == Role.FINANCE_STAFF:
            return resolve_url("worklist")
        return super().get_default_redirect_url()

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {
            **super().get_context_data(**kwargs),
            "passkeys_elsewhere": passkeys.where_passkeys_work(self.request),
        }

    def get_redirect_url(self, request: HttpRequest | None = None) -> str:
        """``?next=``, except the site's root: someone who opened ``/`` signed out asked
        for the site, not for the overview, and lands on their role's first page.
        (``request`` only matches django-stubs' signature; Django passes none.)"""
        asked = super().get_redirect_url()
        return "" if asked == resolve_url("overview") else asked


def _profile(request: StaffRequest, *, status: int = 200, **extra: object) -> HttpResponse:
    user = request.user
    state = mfa.status(user)
    enrolling = not state.enrolled or request.GET.get("replace") == "1" or "code_form" in extra
    context = {"role": user_role(user), "mfa": state, "enrolling": enrolling, **extra}
    if enrolling and "recovery_codes" not in extra:
        device = mfa.pending_authenticator(user)
        context.update(
            qr_svg=mfa.qr_svg(device.config_url),
            secret=mfa.secret_text(device),
            code_form=extra.get("code_form") or CodeForm(),
        )
    if state.enrolled:
        context.setdefault("recovery_form", CodeForm(prefix="recovery"))
    context.setdefault("password_form", PasswordChangeForm(user))
    context.setdefault(
        "time_zone_form", TimeZoneForm(initial={"time_zone": timezones.zone_of(user)})
    )
    if passkeys.may_enrol(user):
        context.update(
            may_passkey=True,
            passkeys=list(passkeys.passkeys_of(user)),
            passkeys_elsewhere=passkeys.where_passkeys_work(request),
        )
        if request.GET.get("passkey") == "added":
            context.setdefault("done", "Your passkey is added.")
    context["sessions"] = staff_sessions.sessions_seen(
        user, current_key=request.session.session_key
    )
    return render(request, "accounts/profile.html", context, status=status)


@require_safe
@role_required()
def profile_view(request: StaffRequest) -> HttpResponse:
    return _profile(request)


@require_POST
@role_required()
def time_zone_view(request: StaffRequest) -> HttpResponse:
    """Set the zone one's pages show times in; an unknown name is refused, nothing saved."""
    form = TimeZoneForm(request.POST)
    if not form.is_valid():
        return _profile(request, status=400, time_zone_form=form)
    name = form.cleaned_data["time_zone"]
    timezones.zone_set(request.user, name)
    timezones.activate(name)  # this answer already shows times in the new zone
    return _profile(request, done=f"Times now show in {name.replace('_', ' ')}.")


@require_POST
@role_required()
def sessions_end_others_view(request: StaffRequest) -> HttpResponse:
    """Sign out every other session of one's account, once confirmed; this one stays."""
    if not SignOutForm(request.POST).confirmed:
        return _sign_out_confirm(
            request,
            request.user,
            own=True,
            action=reverse("profile-sessions-end-others"),
            back=reverse("profile"),
        )
    try:
        ended = staff_sessions.sessions_end(
            request.user, actor=actor_for(request), keep=request.session.session_key
        )
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    return _profile(request, done=_ended_sentence(ended))


@require_POST
@role_required()
def password_change_view(request: StaffRequest) -> HttpResponse:
    """Change one's own password: the current one, the new one twice; every other
    session of the account ends, this one stays."""
    form = PasswordChangeForm(request.user, request.POST)
    if not form.is_valid():
        return _profile(request, status=400, password_form=form)
    try:
        ended = passwords.password_change(
            request.user,
            current_password=form.cleaned_data["current_password"],
            new_password=form.cleaned_data["new_password1"],
            actor=actor_for(request),
            keep_session=request.session.session_key,
        )
    except passwords.PasswordRefused as exc:
        form.add_error("current_password", str(exc))
        return _profile(request, status=400, password_form=form)
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    before = request.session.session_key
    update_session_auth_hash(request, form.user)  # this session stays signed in
    staff_sessions.session_rekeyed(before, request.session.session_key)
    done = "Your password is changed."
    if ended:
        done += f" {ended} other session(s) of your account were signed out."
    return _profile(request, done=done)


def _own_passkey(request: StaffRequest, passkey_id: int) -> None:
    try:
        passkeys.passkey_of(request.user, passkey_id)
    except passkeys.PasskeyNotFound as exc:
        raise Http404("no such passkey of yours") from exc


@require_POST
@role_required(Role.SUPERVISOR, Role.AUDITOR)
def passkey_rename_view(request: StaffRequest, passkey_id: int) -> HttpResponse:
    """Rename one's own passkey; another person's is not found (404)."""
    form = PasskeyRenameForm(request.POST)
    if not form.is_valid():
        _own_passkey(request, passkey_id)  # 404 before saying why
        return _profile(request, status=400, passkey_form=form, passkey_id=passkey_id)
    try:
        passkeys.passkey_rename(
            request.user,
            passkey_id=passkey_id,
            name=form.cleaned_data["name"],
            actor=actor_for(request),
        )
    except passkeys.PasskeyNotFound as exc:
        raise Http404("no such passkey of yours") from exc
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    return _profile(request, done="Your passkey is renamed.")


@require_POST
@role_required(Role.SUPERVISOR, Role.AUDITOR)
def passkey_remove_view(request: StaffRequest, passkey_id: int) -> HttpResponse:
    """Remove one's own passkey with the password and a current code; the other sessions
    end, this one stays (verified by the device the code came from)."""
    _own_passkey(request, passkey_id)  # another person's: 404
    form = PasskeyRemoveForm(request.POST)
    if not form.is_valid():
        return _profile(request, status=400, passkey_form=form, passkey_id=passkey_id)
    try:
        proof, ended = passkeys.passkey_remove(
            request.user,
            passkey_id=passkey_id,
            password=form.cleaned_data["password"],
            current_token=form.cleaned_data["current_token"],
            actor=actor_for(request),
            keep_session=request.session.session_key,
        )
    except passkeys.PasskeyNotFound as exc:
        raise Http404("no such passkey of yours") from exc
    except passkeys.LastSecondFactor as exc:
        return _profile(request, status=409, error=str(exc))
    except mfa.SecondFactorRefused as exc:
        form.add_error(None, str(exc))
        return _profile(request, status=400, passkey_form=form, passkey_id=passkey_id)
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    otp_login(request, proof)  # the removed passkey may have verified this session
    done = "Your passkey is removed."
    if ended:
        done += f" {ended} other session(s) of your account were signed out."
    return _profile(request, done=done)


def _code_step(
    request: StaffRequest, *, form_key: str, step: Callable[[str], list[str]], done: str
) -> HttpResponse:
    """A step taken with a code from the app: the form, the step, and the page that
    shows the recovery codes it issued (once), or says why it was refused."""
    form = CodeForm(request.POST, prefix="recovery" if form_key == "recovery_form" else None)
    if not form.is_valid():
        return _profile(request, status=400, **{form_key: form})
    try:
        codes = step(form.cleaned_data["otp_token"])
    except mfa.SecondFactorRefused as exc:
        form.add_error("otp_token", str(exc))
        return _profile(request, status=400, **{form_key: form})
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    return _profile(request, recovery_codes=codes, done=done)


@require_POST
@role_required()
def authenticator_confirm_view(request: StaffRequest) -> HttpResponse:
    if mfa.status(request.user).enrolled:
        return _authenticator_replace(request)

    def confirm(token: str) -> list[str]:
        device, codes = mfa.authenticator_confirm(request.user, token, actor=actor_for(request))
        # The session was verified by the device this replaces (or the spent enrolment
        # code): it is verified by the new authenticator from now on.
        otp_login(request, device)
        return codes

    return _code_step(
        request, form_key="code_form", step=confirm, done="Your authenticator app is set up."
    )


def _authenticator_replace(request: StaffRequest) -> HttpResponse:
    """Replace the enrolled authenticator: password, a current code and the new app's."""
    form = ReplaceAuthenticatorForm(request.POST)
    if not form.is_valid():
        return _profile(request, status=400, code_form=form)
    data = form.cleaned_data
    try:
        device, codes, ended = mfa.authenticator_replace(
            request.user,
            password=data["password"],
            current_token=data["current_token"],
            new_token=data["otp_token"],
            actor=actor_for(request),
            keep_session=request.session.session_key,
        )
    except mfa.SecondFactorRefused as exc:
        form.add_error("otp_token", str(exc))
        return _profile(request, status=400, code_form=form)
    except AUDIT_UNAVAILABLE:
        return _profile(request, status=503, error=NOT_RECORDED)
    otp_login(request, device)  # this session is verified by the new authenticator now
    done = "Your new authenticator app is set up; the old one no longer works."
    if ended:
        done += " " + _ended_sentence(ended)
    return _profile(request, recovery_codes=codes, done=done)


@require_POST
@role_required()
def recovery_codes_view(request: StaffRequest) -> HttpResponse:
    def issue(token: str) -> list[str]:
        return mfa.recovery_codes_issue(request.user, token, actor=actor_for(request))

    return _code_step(
        request, form_key="recovery_form", step=issue, done="New recovery codes issued."
    )


def _sign_out_confirm(
    request: StaffRequest, target: User, *, own: bool, action: str, back: str
) -> HttpResponse:
    """The question before sessions are signed out: whose, which sessions end (this one
    never), and a confirming post to ``action`` or a way ``back``. Nothing has ended."""
    current = request.session.session_key
    sessions = staff_sessions.sessions_seen(target, current_key=current if own else None)
    ending = [s for s in sessions if not s.current]
    context = {
        "username": target.get_username(),
        "own": own,
        "ending": ending,
        "action": action,
        "back": back,
        "form": SignOutForm(initial={"confirm": True}),
    }
    return render(request, "accounts/sign_out_confirm.html", context)


# --- staff (supervisors) -----------------------------------------------------------------


@dataclass(frozen=True)
class StaffRow:
    """One account on the staff page: its role, second factor, open sessions, whether it
    is the viewer's own, and its reset form (bound when a reset of it was refused)."""

    user: AbstractBaseUser
    role: Role | None
    mfa: mfa.SecondFactorStatus
    own: bool
    sessions: int
    form: ResetSecondFactorForm


def _staff_rows(
    request: StaffRequest, forms: dict[str, ResetSecondFactorForm] | None = None
) -> list[StaffRow]:
    forms = forms or {}
    users = (
        get_user_model()
        .objects.filter(groups__in=Group.objects.filter(name__in=[str(r) for r in STAFF_ROLES]))
        .distinct()
        .order_by("username")
    )
    me = request.user.get_username()
    counts = staff_sessions.live_session_counts()
    return [
        StaffRow(
            user=user,
            role=user_role(user),
            mfa=mfa.status(user),
            own=user.get_username() == me,
            sessions=counts.get(str(user.pk), 0),
            form=forms.get(user.get_username()) or ResetSecondFactorForm(),
        )
        for user in users
    ]


def _staff(
    request: StaffRequest,
    *,
    status: int = 200,
    forms: dict[str, ResetSecondFactorForm] | None = None,
    **extra: object,
) -> HttpResponse:
    context = {"rows": _staff_rows(request, forms), **extra}
    return render(request, "accounts/staff.html", context, status=status)


@require_safe
@role_required(Role.SUPERVISOR)
def staff_view(request: StaffRequest) -> HttpResponse:
    return _staff(request)


@require_POST
@role_required(Role.SUPERVISOR)
def second_factor_reset_view(request: StaffRequest, username: str) -> HttpResponse:
    target = get_user_model().objects.filter(username=username).first()
    if target is None or user_role(target) is None:
        raise Http404("no such staff member")
    form = ResetSecondFactorForm(request.POST)
    if not form.is_valid():
        return _staff(request, status=400, forms={username: form})
    try:
        code = mfa.mfa_reset(
            target,
            actor=actor_for(request),
            reason=form.cleaned_data["reason_text"],
            confirmer=request.user,
            password=form.cleaned_data["password"],
            current_token=form.cleaned_data["current_token"],
        )
    except mfa.SecondFactorRefused as exc:
        if str(exc) == mfa.REPLACE_REFUSED or str(exc).startswith("Too many"):
            form.add_error(None, str(exc))
            return _staff(request, status=400, forms={username: form})
        return _staff(request, status=409, error=str(exc))
    except AUDIT_UNAVAILABLE:
        return _staff(request, status=503, error=NOT_RECORDED)
    return _staff(request, reset={"username": username, "code": code})


@require_POST
@role_required(Role.SUPERVISOR)
def staff_sessions_end_view(request: StaffRequest, username: str) -> HttpResponse:
    """A supervisor signs out every session of a staff member (their own: every other)."""
    target = get_user_model().objects.filter(username=username).first()
    if target is None or user_role(target) is None:
        raise Http404("no such staff member")
    own = target.pk == request.user.pk
    if not SignOutForm(request.POST).confirmed:
        return _sign_out_confirm(
            request,
            target,
            own=own,
            action=reverse("staff-end-sessions", args=[username]),
            back=reverse("staff"),
        )
    try:
        ended = staff_sessions.sessions_end(
            target, actor=actor_for(request), keep=request.session.session_key if own else None
        )
    except AUDIT_UNAVAILABLE:
        return _staff(request, status=503, error=NOT_RECORDED)
    whose = "your other" if own else f"{username}'s"
    return _staff(request, done=f"{ended} of {whose} session{pluralize(ended)} signed out.")
