"""Audit trail services (DESIGN.md §7): appending to a stream by its head
(:mod:`.append`), signing (:mod:`.signing`), the signed daily digest (:mod:`.digests`)
and verification of chains and digests (:mod:`.verify`).

Bare hashes can be recomputed by anyone who can write the table, so the daily digest is
signed with HMAC-SHA256 under ``AUDIT_SIGNING_KEY``, a key that never goes to DynamoDB.
"""

from __future__ import annotations

from reconciliation.services.audit.append import AuditAppendContended, audit_append
from reconciliation.services.audit.digests import (
    DIGEST_ACTION,
    DIGEST_INLINE_HEADS,
    DIGEST_PART_ACTION,
    SYSTEM_STREAM,
    audit_daily_digest,
    audit_digest_write,
    digest_days_due,
    digest_payload,
    last_digest_day,
)
from reconciliation.services.audit.signing import (
    heads_line,
    heads_sha256,
    key_id,
    sign,
    signature_valid,
    signing_key,
)
from reconciliation.services.audit.verify import (
    VERIFY_LOOKBACK_DAYS,
    VERIFY_QUIET_DAYS,
    VerifyReport,
    audit_verify,
    digest_verify,
    verify_default_since,
)

__all__ = [
    "DIGEST_ACTION",
    "DIGEST_INLINE_HEADS",
    "DIGEST_PART_ACTION",
    "SYSTEM_STREAM",
    "VERIFY_LOOKBACK_DAYS",
    "VERIFY_QUIET_DAYS",
    "AuditAppendContended",
    "VerifyReport",
    "audit_append",
    "audit_daily_digest",
    "audit_digest_write",
    "audit_verify",
    "digest_days_due",
    "digest_payload",
    "digest_verify",
    "heads_line",
    "heads_sha256",
    "key_id",
    "last_digest_day",
    "sign",
    "signature_valid",
    "signing_key",
    "verify_default_since",
]
