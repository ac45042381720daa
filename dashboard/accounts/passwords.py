"""A staff member's password set anew (docs/security.md, "Passwords"): by its owner on
the profile, by a superuser in the administration screen, or by ``manage.py
changepassword``. Every way is one :func:`password_set`: a ``staff_password_set`` event
on the account's ``STAFF#`` stream (how, by whom, how many sessions ended; never the
password), every session of the account but the one making the change ended (as when
the second factor is replaced), and an e-mail to the account.

The owner's change needs the current password, counted by the sign-in lockout first
(dashboard/accounts/lockout.py) so the form cannot be used to guess it; the new one
passes Django's validators (``AUTH_PASSWORD_VALIDATORS``) in the form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dashboard.accounts import lockout
from dashboard.accounts.account_changes import OwnerNotice, account_change
from reconciliation.actors import Actor
from reconciliation.audit.models import AuditAction, AuditEvent

if TYPE_CHECKING:
    from django.contrib.auth.models import User

WRONG_CURRENT = "Your current password is not right: nothing was changed."


class PasswordRefused(Exception):
    """The change was refused; the message says why in words a person can act on."""


def password_change(
    user: User, *, current_password: str, new_password: str, actor: Actor, keep_session: str | None
) -> int:
    """The owner changes their password: the current one first (counted by the lockout),
    then :func:`password_set`. Returns how many other sessions ended; raises
    :class:`PasswordRefused` having changed nothing."""
    address = actor.address or None
    lockout.password_check(
        user, current_password, address=address, refused=PasswordRefused, wrong=WRONG_CURRENT
    )
    lockout.attempts_clear(username=user.get_username(), address=address)
    return password_set(
        user, new_password=new_password, actor=actor, keep_session=keep_session, via="profile"
    )


def password_set(
    user: User, *, new_password: str | None, actor: Actor, keep_session: str | None, via: str
) -> int:
    """Set ``user``'s password (``None``: Django's own form has just set it, in the
    caller's transaction), end every session of the account but ``keep_session``, and
    append the event first in the same transaction: refused, nothing changes. The
    account is e-mailed afterwards. Returns how many sessions ended."""
    with account_change(
        user,
        AuditEvent(
            action=AuditAction.STAFF_PASSWORD_SET,
            actor=actor,
            detail={
                "via": via,
                "by": "owner" if actor.username == user.get_username() else str(actor.role),
            },
        ),
        keep_session=keep_session,
        notice=OwnerNotice(
            subject="Your password was changed", change="The password of your account was changed"
        ),
    ) as sessions:
        if new_password is not None:
            user.set_password(new_password)
            user.save(update_fields=["password"])
    return len(sessions)
