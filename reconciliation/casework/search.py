"""Case search (DESIGN.md §8: /cases/?q=): find cases by case id, client key or donor ref.

Every lookup is a GetItem or a Query on a keyed index (never a Scan).
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciliation.cases.models import Case, is_case_id
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.selectors import InvalidFilter
from reconciliation.stores import Store

# --- search (DESIGN.md §8: /cases/?q=) ---------------------------------------------------

MAX_SEARCH_LENGTH = 255  # an idempotency key's limit; donor refs and case ids are shorter


@dataclass(frozen=True)
class Found:
    """A case the search found, and what matched: ``case_id``, ``client_key`` (with the
    tenant whose key it is) or ``donor_ref``."""

    case: Case
    matched: str
    tenant: str = ""


def case_search(query: str, *, tenants: list[str], store: Store) -> list[Found]:
    """Cases by what a person was told: a case id (one GetItem), the client's own
    idempotency key (one ``by_intent`` Query per tenant: staff do not know the tenant,
    and tenants are few), or a donor ref (one ``by_donor`` Query). Every key is tried,
    since one string may be several; ``tenant#key`` (the internal intent id) is accepted
    too. Raises :class:`InvalidFilter` for an empty or oversized query."""
    text = query.strip()
    if not text:
        raise InvalidFilter({"q": "type a case id, the client's idempotency key or a donor ref"})
    if len(text) > MAX_SEARCH_LENGTH or any(ord(c) < 32 for c in text):
        raise InvalidFilter(
            {"q": f"at most {MAX_SEARCH_LENGTH} printable characters, no line breaks"}
        )
    repo = CaseRepository(store)
    found: list[Found] = []
    seen: set[str] = set()

    def add(cases: list[Case], matched: str, tenant: str = "") -> None:
        for case in cases:
            if case.case_id not in seen:
                seen.add(case.case_id)
                found.append(Found(case, matched, tenant))

    if is_case_id(text.upper()):
        case = repo.get(text.upper(), consistent=False)
        add([case] if case else [], "case_id")
    for tenant in tenants:
        add(repo.get_many(repo.ids_for_intent(f"{tenant}#{text}")), "client_key", tenant)
    if "#" in text:
        tenant = text.split("#", 1)[0]
        add(repo.get_many(repo.ids_for_intent(text)), "client_key", tenant)
    add(repo.get_many(repo.ids_for_donor(text)), "donor_ref")
    return found


def cases_for_intent(intent_id: str, store: Store) -> list[Case]:
    return CaseRepository(store).get_many(CaseRepository(store).ids_for_intent(intent_id))
