"""Audit signing: the heads digest that checkpoints sign and export manifests carry."""

from __future__ import annotations

from reconciliation.audit.signing import heads_line, heads_sha256

HEADS = [
    ("CASE#c-0001", 3, "ab" * 32),
    ("PLEDGE#p-1", 1, "0" * 64),
    ("SYSTEM", 12, "cd" * 32),
]
# Computed once and pasted (and checked with ``printf … | sha256sum``), never re-derived
# with the code's own formula.
GOLDEN_HEADS_SHA256 = "b9884088666ec9a05a2e01a6fb28a7435568519ea097fcad42e7fc50e51ac319"


def test_heads_sha256_of_fixed_heads_is_a_fixed_digest():
    """Three sorted heads digest to a fixed count and SHA-256, one canonical JSON array a
    line, whether the heads come as tuples or (read back from JSON) as lists.

    A different digest for these heads means the heads format changed: every stored
    checkpoint and daily digest, and every export manifest already delivered, carries a
    digest made the old way, so ``verify_audit`` would report a heads sha256 mismatch on
    every checkpoint and ``verify_export`` a chain heads mismatch on every manifest."""
    assert heads_line(*HEADS[0]) == (
        b'["CASE#c-0001",3,"abababababababababababababababababababababababababababababababab"]\n'
    )
    assert heads_sha256(HEADS) == (3, GOLDEN_HEADS_SHA256)
    assert heads_sha256([list(h) for h in HEADS]) == (3, GOLDEN_HEADS_SHA256)
