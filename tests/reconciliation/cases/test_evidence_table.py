"""The disposition × evidence table is one table: the docs show exactly what the code
enforces (docs/architecture.md, "Disposition × evidence")."""

from __future__ import annotations

from pathlib import Path

from reconciliation.cases.policy import (
    EVIDENCE_NEEDED,
    LABELS,
    EvidenceFacts,
    EvidenceNeed,
    evidence_refusal,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"


def _doc_rows() -> dict[str, str]:
    text = DOC.read_text()
    section = text.split("### Disposition × evidence", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("action", "---"):
            rows[cells[0]] = cells[2]
    return rows


def test_the_documented_table_is_the_enforced_table():
    """Every action's row in the docs names the evidence EVIDENCE_NEEDED requires."""
    expected = {LABELS[action]: need.label for action, need in EVIDENCE_NEEDED.items()}
    assert _doc_rows() == expected


def test_every_action_has_an_evidence_rule():
    """No disposition or override is left out of the table (it would need nothing)."""
    assert set(EVIDENCE_NEEDED) == set(LABELS)


def test_a_cancellation_without_a_durable_record_is_no_duplicate():
    """'Duplicate correctly rejected' is refused when no pledge exists, and allowed when
    one does, whatever its payload."""
    nothing = EvidenceFacts()
    other = EvidenceFacts(pledge_exists=True, pledge_recorded=True)
    assert evidence_refusal("DUPLICATE_REJECTED_OK", nothing)
    assert evidence_refusal("DUPLICATE_REJECTED_OK", other) is None


def test_confirmed_committed_needs_this_requests_payload():
    """A pledge recorded under the key with another payload does not confirm this one."""
    other = EvidenceFacts(pledge_exists=True, pledge_recorded=True)
    same = EvidenceFacts(pledge_exists=True, pledge_recorded=True, pledge_same_payload=True)
    assert "different payload" in evidence_refusal("CONFIRMED_COMMITTED", other)
    assert evidence_refusal("CONFIRMED_COMMITTED", same) is None
    assert evidence_refusal("RETRY_COMMIT", other)
    assert evidence_refusal("RETRY_COMMIT", same) is None
    assert evidence_refusal("RETRY_COMMIT", EvidenceFacts()) is None


def test_release_is_refused_once_a_pledge_is_recorded():
    """Releasing a claim could undo a recorded pledge: refused, whatever the claim says."""
    recorded = EvidenceFacts(
        pledge_exists=True, pledge_recorded=True, pledge_same_payload=True, claim_exists=True
    )
    open_claim = EvidenceFacts(claim_exists=True)
    assert "recorded" in evidence_refusal("RELEASE_CLAIM", recorded)
    assert evidence_refusal("RELEASE_CLAIM", open_claim) is None
    assert EVIDENCE_NEEDED["RELEASE_CLAIM"] == EvidenceNeed.NO_RECORDED_PLEDGE_AND_AN_OPEN_CLAIM
