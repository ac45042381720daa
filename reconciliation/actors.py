"""Who acts: staff roles (Django groups) and the system itself."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from reconciliation.codes import Code


class Role(Code):
    FINANCE_STAFF = "finance_staff", "Finance staff", "Works cases; records dispositions."
    SUPERVISOR = "supervisor", "Supervisor", "Works cases and approves others' overrides."
    AUDITOR = "auditor", "Auditor", "Reads and exports the audit trail; changes nothing."
    SYSTEM = "system", "System", "A sweep, task or command of the system itself."
    API = "api", "API client", "A caller of the intake API."
    ADMIN = "admin", "Administrator", "A superuser, in the administration screen."


# Most privileged first. A user belongs to one group (add_staff keeps it so); if several,
# the first of these wins for display, and services still check the role they are given.
STAFF_ROLES = (Role.SUPERVISOR, Role.FINANCE_STAFF, Role.AUDITOR)


def staff_role(group_names: Iterable[str]) -> Role | None:
    """The role of a user in these Django groups (``None``: not staff)."""
    names = set(group_names)
    return next((r for r in STAFF_ROLES if str(r) in names), None)


@dataclass(frozen=True)
class Actor:
    """The acting party, recorded in audit events as it was at the time, so the record
    outlives the account."""

    username: str
    role: Role
    email: str = ""
    address: str = ""
    correlation_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def as_audit(self) -> dict[str, str]:
        return {"username": self.username, "email": self.email, "role": str(self.role)}


def system_actor(correlation_id: str | None = None) -> Actor:
    return Actor(
        username="system",
        role=Role.SYSTEM,
        correlation_id=correlation_id or str(uuid.uuid4()),
    )


def command_actor(command: str) -> Actor:
    """The system, acting through ``manage.py command`` run by this OS user."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = "unknown"
    return Actor(username="system", role=Role.SYSTEM, address=f"manage.py {command} ({who})")
