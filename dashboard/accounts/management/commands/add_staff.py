"""``manage.py add_staff USERNAME --role ROLE [--password P] [--email E] [--new-authenticator]
[--superuser]``: create or update a staff user in exactly one role group; ``--superuser``
also opens the administration screen (/admin/) to them.

Every change (account created, role changed, password set, authenticator enrolled) is an
audit event on ``STAFF#USERNAME``, appended inside the database transaction that makes
it: when the audit trail cannot be written, nothing changes.

Where a second factor applies (supervisors and auditors while ``STAFF_MFA_REQUIRED``) and
the account has no authenticator yet, or ``--new-authenticator`` is given, one is
enrolled now: recovery codes are printed, then the ``otpauth://`` URI on the last line
(docs/design.md §11) for the new colleague to scan.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from dashboard.accounts import mfa, passwords
from dashboard.accounts.events import account_event_append
from dashboard.accounts.views import AUDIT_UNAVAILABLE
from dashboard.auth import forget_role, user_role
from reconciliation.actors import STAFF_ROLES, Actor, Role, command_actor
from reconciliation.audit.models import AuditAction, AuditEvent


class Command(BaseCommand):
    help = "Create or update a staff user in exactly one role group (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=[str(r) for r in STAFF_ROLES])
        parser.add_argument("--password", help="default: a random one, printed once")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--new-authenticator",
            action="store_true",
            help="enrol a new authenticator (the old one stops working) and print its URI",
        )
        parser.add_argument(
            "--superuser",
            action="store_true",
            help="also a superuser: reaches the administration screen at /admin/ "
            "(with a second factor where one applies)",
        )

    def handle(
        self,
        *args: Any,
        username: str,
        role: str,
        password: str | None,
        email: str,
        **opts: Any,
    ) -> None:
        username = username.strip()
        if not username or len(username) > 150:
            raise CommandError("USERNAME must be 1-150 characters")
        actor = command_actor("add_staff")
        try:
            with transaction.atomic():
                lines = self._apply(username, Role(role), password, email, actor, opts)
        except mfa.SecondFactorRefused as exc:
            raise CommandError(str(exc)) from exc
        except AUDIT_UNAVAILABLE as exc:
            raise CommandError(
                f"the audit trail could not be written ({exc}): nothing was changed"
            ) from exc
        for line in lines:
            self.stdout.write(line)

    def _apply(
        self,
        username: str,
        role: Role,
        password: str | None,
        email: str,
        actor: Actor,
        opts: dict[str, Any],
    ) -> list[str]:
        user, created = get_user_model().objects.get_or_create(username=username)
        before = None if created else _standing(user, user_role(user))
        generated = password is None and (created or not user.has_usable_password())
        if generated:
            password = secrets.token_urlsafe(12)
        _account_save(user, password, email, superuser=bool(opts.get("superuser")))
        _role_set(user, role)
        _recorded(user, actor, before=before, after=_standing(user, role))
        if password is not None and not created:
            # Set above with the account's other fields; the event, the sessions it ends
            # and the e-mail as for every password set (dashboard/accounts/passwords.py).
            passwords.password_set(
                user, new_password=None, actor=actor, keep_session=None, via="add_staff"
            )
        lines = [
            f"{'created' if created else 'updated'} {username} in group {role}"
            + (" (superuser: /admin/)" if user.is_superuser else "")
        ]
        if generated:
            lines.append(f"password for {username}: {password}")
        if opts.get("new_authenticator") or (
            mfa.mfa_required(user) and mfa.authenticator(user) is None
        ):
            uri, codes = mfa.authenticator_enrol_now(user, actor=actor)
            lines.append(f"recovery codes for {username}: {' '.join(codes)}")
            lines.append(uri)
        return lines


def _standing(user: Any, role: Role | None) -> dict[str, Any]:
    """The account as its audit events show it: its role (empty for none), active, and
    superuser if so."""
    return {
        "role": role or "",
        "active": user.is_active,
        **({"superuser": True} if user.is_superuser else {}),
    }


def _account_save(user: Any, password: str | None, email: str, *, superuser: bool) -> None:
    """Active, with ``password`` and ``email`` where given; a superuser if asked (never
    taken away here)."""
    if superuser:
        user.is_superuser = user.is_staff = True
    if password is not None:
        user.set_password(password)
    if email:
        user.email = email
    user.is_active = True
    user.save()


def _role_set(user: Any, role: Role) -> None:
    """``user`` in the group of ``role`` and no other staff role's."""
    for name in STAFF_ROLES:
        Group.objects.get_or_create(name=str(name))
    user.groups.remove(*Group.objects.filter(name__in=[str(r) for r in STAFF_ROLES]))
    user.groups.add(Group.objects.get(name=role))
    forget_role(user)  # the cached role is stale now


def _recorded(
    user: Any, actor: Actor, *, before: dict[str, Any] | None, after: dict[str, Any]
) -> None:
    """The account's creation (no ``before``), or its change of standing if any."""
    if before is None:
        account_event_append(
            user, AuditEvent(action=AuditAction.STAFF_CREATED, actor=actor, after=after)
        )
    elif before != after:
        account_event_append(
            user,
            AuditEvent(
                action=AuditAction.STAFF_ROLE_CHANGED, actor=actor, before=before, after=after
            ),
        )
