"""Audit trail services (docs/design.md §7): appending to a stream by its head
(:mod:`.append`), signing (:mod:`.signing`), the signed checkpoint of every period
(:mod:`.checkpoints`) and verification of chains, stored heads and checkpoints
(:mod:`.verify`). What verification cannot catch, and for how long, is in
``docs/audit.md``.
"""

from __future__ import annotations

from reconciliation.audit.append import AuditAppendContended, audit_append
from reconciliation.audit.checkpoints import (
    CHECKPOINT_ACTION,
    CHECKPOINT_INLINE_HEADS,
    CHECKPOINT_OVERDUE_S,
    CHECKPOINT_PART_ACTION,
    CHECKPOINT_SETTLE_S,
    DIGEST_ACTION,
    DIGEST_PART_ACTION,
    SIGNED_ACTIONS,
    SYSTEM_STREAM,
    Period,
    audit_checkpoint,
    audit_checkpoint_write,
    checkpoint_payload,
    checkpoint_period_s,
    checkpoint_periods_due,
    covered_until,
    digest_payload,
    period_setting_problem,
)
from reconciliation.audit.signing import (
    heads_line,
    heads_sha256,
    key_id,
    sign,
    signature_valid,
    signing_key,
)
from reconciliation.audit.verify import (
    VERIFY_LOOKBACK_DAYS,
    VERIFY_QUIET_DAYS,
    VerifyReport,
    audit_verify,
    checkpoint_verify,
    late_checkpoints,
    missing_checkpoints,
    verify_default_since,
)

__all__ = [
    "CHECKPOINT_ACTION",
    "CHECKPOINT_INLINE_HEADS",
    "CHECKPOINT_OVERDUE_S",
    "CHECKPOINT_PART_ACTION",
    "CHECKPOINT_SETTLE_S",
    "DIGEST_ACTION",
    "DIGEST_PART_ACTION",
    "SIGNED_ACTIONS",
    "SYSTEM_STREAM",
    "VERIFY_LOOKBACK_DAYS",
    "VERIFY_QUIET_DAYS",
    "AuditAppendContended",
    "Period",
    "VerifyReport",
    "audit_append",
    "audit_checkpoint",
    "audit_checkpoint_write",
    "audit_verify",
    "checkpoint_payload",
    "checkpoint_period_s",
    "checkpoint_periods_due",
    "checkpoint_verify",
    "covered_until",
    "digest_payload",
    "heads_line",
    "heads_sha256",
    "key_id",
    "late_checkpoints",
    "missing_checkpoints",
    "period_setting_problem",
    "sign",
    "signature_valid",
    "signing_key",
    "verify_default_since",
]
