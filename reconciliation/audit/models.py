"""The audit trail's vocabulary: every action an event can record, with the words the
pages show for it (``AuditAction.CASE_OPENED.label``), and the event a writer hands to
the chain (:class:`AuditEvent`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciliation.actors import Actor
from reconciliation.codes import Code

# The audit trail's own stream: signed checkpoints and their parts, recorded configuration.
SYSTEM_STREAM = "SYSTEM"


class AuditAction(Code):
    # Cases
    CASE_OPENED = "case_opened", "Case opened"
    CASE_ASSIGNED = "case_assigned", "Assigned"
    CASE_UNASSIGNED = "case_unassigned", "Unassigned"
    CASE_ESCALATED = "case_escalated", "Escalated"
    DISPOSITION_RECORDED = "disposition_recorded", "Disposition recorded"
    RETRY_COMMIT_REQUESTED = "retry_commit_requested", "Commit retry requested"
    RETRY_COMMIT_SUCCEEDED = "retry_commit_succeeded", "Commit retry succeeded"
    RETRY_COMMIT_FAILED = "retry_commit_failed", "Commit retry failed"
    OVERRIDE_REQUESTED = "override_requested", "Override requested"
    OVERRIDE_APPROVED = "override_approved", "Override approved"
    OVERRIDE_REJECTED = "override_rejected", "Override rejected"
    OVERRIDE_EXPIRED = "override_expired", "Override request expired"
    CASE_NOTE_ADDED = (
        "case_note_added",
        "Note added",
        "Free text by a person working the case; changes nothing of the case itself.",
    )
    # Pledges
    PLEDGE_RECORDED = "pledge_recorded", "Pledge recorded"
    PLEDGE_VOIDED = "pledge_voided", "Pledge voided"
    ACK_REDELIVERED = (
        "ack_redelivered",
        "Acknowledgement redelivered",
        "A member of staff made one acknowledgement delivery due now (sent again).",
    )
    # Staff accounts
    STAFF_CREATED = "staff_created", "Staff account created"
    STAFF_ROLE_CHANGED = "staff_role_changed", "Staff role changed"
    STAFF_PASSWORD_SET = "staff_password_set", "Staff password set"
    MFA_ENROLLED = "mfa_enrolled", "Authenticator enrolled"
    MFA_RESET = "mfa_reset", "Second factor reset"
    MFA_REPLACED = (
        "mfa_replaced",
        "Authenticator replaced",
        "By its owner, with the password and a code from the device it replaces.",
    )
    RECOVERY_CODES_ISSUED = "recovery_codes_issued", "Recovery codes issued"
    PASSKEY_ENROLLED = "passkey_enrolled", "Passkey enrolled"
    PASSKEY_RENAMED = "passkey_renamed", "Passkey renamed"
    PASSKEY_REMOVED = (
        "passkey_removed",
        "Passkey removed",
        "By its owner, with the password and a code from the app or a recovery code.",
    )
    SIGN_IN_SUCCEEDED = "sign_in_succeeded", "Signed in"
    SIGN_IN_FAILED = "sign_in_failed", "Sign-in failed"
    SIGN_IN_LOCKED_OUT = (
        "sign_in_locked_out",
        "Sign-in locked",
        "Too many failed sign-ins from one address: refused there until the cool-off ends.",
    )
    SIGNED_OUT = "signed_out", "Signed out"
    SESSIONS_ENDED = (
        "sessions_ended",
        "Sessions ended",
        "By the account's owner (its other sessions) or by a supervisor (all of them).",
    )
    STAFF_CHANGED = (
        "staff_changed",
        "Staff account changed",
        "Changed in the administration screen: active, superuser or e-mail.",
    )
    STAFF_DELETED = "staff_deleted", "Staff account deleted"
    # Tenants: their funds and API tokens (administration screen and commands)
    TENANT_CREATED = "tenant_created", "Tenant created", "With its default funds."
    FUND_REGISTERED = "fund_registered", "Fund registered"
    FUND_LIMIT_CHANGED = "fund_limit_changed", "Fund limit changed"
    FUND_REMOVED = "fund_removed", "Fund removed", "Intake refuses pledges to it from now on."
    API_TOKEN_ISSUED = "api_token_issued", "API token issued"
    API_TOKEN_REVOKED = "api_token_revoked", "API token revoked"
    WEBHOOK_ADDED = (
        "webhook_added",
        "Webhook endpoint added",
        "Acknowledgements of recorded pledges are sent to it, signed.",
    )
    WEBHOOK_SECRET_ROTATED = (
        "webhook_secret_rotated",
        "Webhook signing secret rotated",
        "A new secret signs its deliveries; the previous one signs them too until it expires.",
    )
    WEBHOOK_LIMITS_SET = (
        "webhook_limits_set",
        "Webhook delivery limits set",
        "How many requests a dispatcher keeps open to it, and how many a second it sends.",
    )
    WEBHOOK_DISABLED = (
        "webhook_disabled",
        "Webhook endpoint disabled",
        "Every delivery to it failed for a day; its acknowledgements wait until it is enabled.",
    )
    INTAKE_LIMIT_CHANGED = (
        "intake_limit_changed",
        "Intake rate limit changed",
        "Requests per second and burst; empty: the settings' default.",
    )
    # Exports
    EXPORT_REQUESTED = "export_requested", "Export requested"
    EXPORT_COMPLETED = "export_completed", "Export completed"
    EXPORT_FAILED = "export_failed", "Export failed"
    EXPORT_ABANDONED = "export_abandoned", "Export abandoned"
    EXPORT_DOWNLOADED = "export_downloaded", "Export downloaded"
    # The system
    DRILL_RUN = "drill_run", "Drill run"
    CONFIG_ACCEPTED = (
        "config_accepted",
        "Configuration accepted",
        "ddb_setup --accept-config: the recorded configuration (region map, shards, token "
        "window, TTLs) replaced by this one, deliberately.",
    )
    AUDIT_CHECKPOINT = (
        "audit_checkpoint",
        "Signed checkpoint",
        "The heads of every stream that changed in one period, signed.",
    )
    AUDIT_CHECKPOINT_PART = "audit_checkpoint_part", "Signed checkpoint (part)"
    AUDIT_DIGEST = "audit_digest", "Daily digest", "A signed day's heads, before checkpoints."
    AUDIT_DIGEST_PART = "audit_digest_part", "Daily digest (part)"


@dataclass(frozen=True)
class AuditEvent:
    """What was done, by whom, to what: an event before it has a place in a stream.

    ``audit_event_build`` (``reconciliation.audit.repository``) adds the placement
    (``stream``, ``seq``, ``prev_hash``, ``hash``, ``day_shard``, ``at_id``) and returns
    the item as stored. ``at`` and ``event_id`` left ``None`` become the time and a new
    id when the event is placed. Values must be JSON-plain (amounts as strings)."""

    action: AuditAction
    actor: Actor
    case_id: str | None = None
    intent_id: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    disposition: str | None = None
    reason_code: str | None = None
    reason_text: str | None = None
    detail: dict[str, Any] | None = None
    at: datetime | None = None
    event_id: str | None = None
