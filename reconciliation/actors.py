"""Who acts: staff roles (Django groups) and the system itself."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum


class Role(StrEnum):
    FINANCE_STAFF = "finance_staff"
    SUPERVISOR = "supervisor"
    AUDITOR = "auditor"
    SYSTEM = "system"
    API = "api"


STAFF_ROLES = (Role.FINANCE_STAFF, Role.SUPERVISOR, Role.AUDITOR)


@dataclass(frozen=True)
class Actor:
    """The acting party, recorded in audit events as it was at the time, so the record
    outlives the account."""

    username: str
    role: Role
    email: str = ""
    address: str = ""
    correlation_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def as_audit(self) -> dict:
        return {"username": self.username, "email": self.email, "role": str(self.role)}


def system_actor(correlation_id: str | None = None) -> Actor:
    return Actor(
        username="system",
        role=Role.SYSTEM,
        correlation_id=correlation_id or str(uuid.uuid4()),
    )
