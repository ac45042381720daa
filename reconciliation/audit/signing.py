"""Signing of audit checkpoints and export manifests (docs/design.md §7).

Bare hashes can be recomputed by anyone who can write the table, so what must outlive
such a writer is signed with HMAC-SHA256 under ``AUDIT_SIGNING_KEY``, a key that never
goes to DynamoDB.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from reconciliation.audit.repository import canonical_json


def signing_key() -> bytes:
    key = settings.AUDIT_SIGNING_KEY
    if not key:
        raise RuntimeError("AUDIT_SIGNING_KEY is empty; digests and manifests need a key")
    return key.encode() if isinstance(key, str) else key


def key_id() -> str:
    """A public fingerprint of the key, so a verifier can tell "wrong key" from "forged"."""
    return hashlib.sha256(b"audit-key-id:" + signing_key()).hexdigest()[:16]


def sign(payload: dict[str, Any]) -> str:
    return hmac.new(signing_key(), canonical_json(payload), hashlib.sha256).hexdigest()


def signature_valid(payload: dict[str, Any], signature: str) -> bool:
    return hmac.compare_digest(sign(payload), signature or "")


def heads_line(stream: str, seq: int, digest: str) -> bytes:
    return canonical_json([stream, seq, digest]) + b"\n"


def heads_sha256(heads: Iterable[tuple[str, int, str] | list[Any]]) -> tuple[int, str]:
    """Count and SHA-256 of sorted heads, one canonical JSON array a line."""
    sha = hashlib.sha256()
    count = 0
    for stream, seq, digest in heads:
        sha.update(heads_line(stream, int(seq), digest))
        count += 1
    return count, sha.hexdigest()
