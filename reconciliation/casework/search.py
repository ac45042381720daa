"""Search (docs/design.md §11: /cases/?q=): find cases by case id, client key or donor
ref, and pledges by client key or donor ref (a pledge with no case is found too).

Every lookup is a GetItem or a Query on a keyed index (never a Scan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciliation.cases.models import DRILL_TENANT, Case, is_case_id
from reconciliation.cases.repository import CaseRepository
from reconciliation.casework.regions import stores_of
from reconciliation.casework.selectors import InvalidFilter
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    Pledge,
    claim_pk,
    intent_id_for,
)
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request_log import requests_for_key
from reconciliation.stores import Store, case_tag

# --- search (docs/design.md §11: /cases/?q=) ---------------------------------------------------

MAX_SEARCH_LENGTH = 255  # an idempotency key's limit; donor refs and case ids are shorter


@dataclass(frozen=True)
class Found:
    """A case the search found, and what matched: ``case_id``, ``client_key`` (with the
    tenant whose key it is) or ``donor_ref``."""

    case: Case
    matched: str
    tenant: str = ""


def without_drill(found: list[Found]) -> tuple[list[Found], int]:
    """``found`` without the drill's cases (``DRILL_TENANT``), and how many were left
    out. A drill case asked for by its own id stays: that person wants that case."""
    kept = [f for f in found if f.case.tenant != DRILL_TENANT or f.matched == "case_id"]
    return kept, len(found) - len(kept)


def pledges_without_drill(found: list[FoundPledge]) -> tuple[list[FoundPledge], int]:
    """``found`` without the drill's pledges (``DRILL_TENANT``), and how many were left
    out: as :func:`without_drill` for cases."""
    kept = [f for f in found if f.tenant != DRILL_TENANT]
    return kept, len(found) - len(kept)


def search_text(query: str) -> str:
    """The query stripped; raises :class:`InvalidFilter` for an empty or oversized one."""
    text = query.strip()
    if not text:
        raise InvalidFilter({"q": "type a case id, the client's idempotency key or a donor ref"})
    if len(text) > MAX_SEARCH_LENGTH or any(ord(c) < 32 for c in text):
        raise InvalidFilter(
            {"q": f"at most {MAX_SEARCH_LENGTH} printable characters, no line breaks"}
        )
    return text


def case_search(
    query: str,
    *,
    tenants: list[str],
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    home: Callable[[str], Store] | None = None,
) -> list[Found]:
    """Cases by what a person was told: a case id (one GetItem, in the region the id
    names), the client's own idempotency key (one ``by_intent`` Query per tenant, in the
    key's home region ``home(claim pk)``: staff do not know the tenant, and tenants are
    few), or a donor ref in any letter case (one ``by_donor_key`` Query per region).
    Every key is tried, since one string may be several; ``tenant#key`` (the internal
    intent id) is accepted too.
    ``store`` alone reads one region for all three. Raises :class:`InvalidFilter` for an
    empty or oversized query."""
    regions = stores_of(store, stores)
    text = search_text(query)
    found: list[Found] = []
    seen: set[str] = set()

    def add(cases: list[Case], matched: str, tenant: str = "") -> None:
        for case in cases:
            if case.case_id not in seen:
                seen.add(case.case_id)
                found.append(Found(case, matched, tenant))

    def of_intent(intent_id: str) -> list[Case]:
        tenant, _, key = intent_id.partition("#")
        region = home(claim_pk(tenant, OPERATION_CREATE_PLEDGE, key)) if home else regions[0]
        return cases_for_intent(intent_id, store=region)

    # Typed in any case: the id's letters are upper case, the region it names lower.
    case_id = text[:18].upper() + text[18:].lower()
    if is_case_id(case_id):
        region = next((r for r in regions if r.tag == case_tag(case_id)), None)
        case = CaseRepository(region).get(case_id, consistent=False) if region else None
        add([case] if case else [], "case_id")
    for tenant in tenants:
        add(of_intent(f"{tenant}#{text}"), "client_key", tenant)
    if "#" in text:
        add(of_intent(text), "client_key", text.split("#", 1)[0])
    for region in regions:
        repo = CaseRepository(region)
        add(repo.get_many(owned_ids(repo.ids_for_donor(text), region)), "donor_ref")
    return found


def owned_ids(case_ids: list[str], store: Store) -> list[str]:
    """The ids of cases living in ``store``'s region (not other regions' replicas)."""
    return [c for c in case_ids if case_tag(c) == store.tag]


def cases_for_intent(intent_id: str, store: Store) -> list[Case]:
    """Every case of one intent: they live in the intent's home region (``store``)."""
    repo = CaseRepository(store)
    return repo.get_many(owned_ids(repo.ids_for_intent(intent_id), store))


# --- pledges (a clean pledge, with no case, is found by its key and donor) ----


@dataclass(frozen=True)
class FoundPledge:
    """A client key the search found stored: its pledge (None while none is recorded)
    and its claim's status (None once TTL removed the claim), and what matched:
    ``client_key`` or ``donor_ref``."""

    tenant: str
    idempotency_key: str
    matched: str
    pledge: Pledge | None
    claim_status: ClaimStatus | None


def pledge_search(
    query: str,
    *,
    tenants: list[str],
    stores: Sequence[Store],
    home: Callable[[str], Store],
) -> list[FoundPledge]:
    """Pledges (or claims with no pledge yet, or keys only answered: the request log) by
    the client's own key under each known tenant, or ``tenant#key``: a GetItem of the
    pledge, and of the claim when there is no pledge, then a Query of the request log
    when there is neither, in the key's home region; and by donor ref in any letter case: one
    ``pledges.by_donor_key`` Query per region, then a GetItem per intent found (at most
    50). Raises :class:`InvalidFilter` as :func:`case_search` does. Not by amount: see
    docs/architecture.md, "Search"."""
    text = search_text(query)
    found: list[FoundPledge] = []
    seen: set[str] = set()

    def by_key(tenant: str, key: str, matched: str) -> None:
        intent_id = intent_id_for(tenant, key)
        if not tenant or not key or intent_id in seen:
            return
        pk = claim_pk(tenant, OPERATION_CREATE_PLEDGE, key)
        region = home(pk)
        pledge = PledgeRepository(region).get(intent_id, consistent=False)
        claim = ClaimRepository(region).get(pk, consistent=False) if pledge is None else None
        if pledge is None and claim is None and not requests_for_key(tenant, key, store=region):
            return  # nothing stored, and no answer given for it (request log)
        seen.add(intent_id)
        found.append(FoundPledge(tenant, key, matched, pledge, claim.status if claim else None))

    for tenant in tenants:
        by_key(tenant, text, "client_key")
    if "#" in text:
        tenant, _, key = text.partition("#")
        by_key(tenant, key, "client_key")
    for region in stores:
        repo = PledgeRepository(region)
        for intent_id in repo.intents_for_donor(text):
            if intent_id in seen:
                continue  # a replica of one found in its home region
            pledge = repo.get(intent_id, consistent=False)
            if pledge is not None:
                seen.add(intent_id)
                found.append(
                    FoundPledge(pledge.tenant, pledge.idempotency_key, "donor_ref", pledge, None)
                )
    return found
