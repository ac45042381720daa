"""``manage.py changepassword``: Django's command (prompts, validators, three tries),
then what every password set does (dashboard/accounts/passwords.py · ``password_set``):
the ``staff_password_set`` event, every session of the account ended, the account
e-mailed. The event is appended in the transaction that saves the password: refused,
the password stays as it was. (``dashboard.accounts`` is listed before
``django.contrib.auth`` in ``INSTALLED_APPS`` so this command wins.)"""

from __future__ import annotations

import getpass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.management.commands import changepassword
from django.core.management.base import CommandError
from django.db import transaction

from dashboard.accounts import passwords
from dashboard.accounts.views import AUDIT_UNAVAILABLE
from reconciliation.actors import Actor, Role


class Command(changepassword.Command):
    def handle(self, *args: Any, **options: Any) -> str:
        username = options["username"] or getpass.getuser()
        actor = Actor(
            username="system", role=Role.SYSTEM, address=f"manage.py changepassword ({_os_user()})"
        )
        try:
            with transaction.atomic(using=options["database"]):
                done = super().handle(*args, **options)
                user = (
                    get_user_model()
                    ._default_manager.using(options["database"])
                    .get(**{get_user_model().USERNAME_FIELD: username})
                )
                ended = passwords.password_set(
                    user, new_password=None, actor=actor, keep_session=None, via="changepassword"
                )
        except AUDIT_UNAVAILABLE as exc:
            raise CommandError(
                f"the audit trail could not be written ({exc}): the password was not changed"
            ) from exc
        return f"{done}; {ended} session(s) of the account were signed out"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
