"""What staff see of one pledge (``/pledges/<tenant>/<key>/``, docs/design.md §11): its
claim, the durable pledge, its ledger shard, its cases, its audit events and the intake
request log (every answer the API gave for the key).

Every read is a GetItem or a Query in the key's home region (the edge passes that
region's store): no Scan. The deliveries of the pledge's acknowledgement are read beside
this, by the page (reconciliation/acks/deliveries.py · pledge_acks): acknowledgements and
casework are independent packages.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciliation.audit.repository import AuditRepository
from reconciliation.audit.search import AuditRow
from reconciliation.cases.models import Case
from reconciliation.casework.search import cases_for_intent
from reconciliation.claims.ledger import LedgerRepository, LedgerShard
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    Claim,
    Pledge,
    claim_pk,
    intent_id_for,
)
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request import PledgeRequest
from reconciliation.claims.request_log import IntakeRequest, requests_for_key
from reconciliation.stores import Store, pledge_stream


@dataclass(frozen=True)
class PledgeDetail:
    """One client key of one tenant: whatever of it is stored. ``claim`` is gone once
    TTL removed it; ``pledge`` is absent when nothing was recorded (a stuck, rejected or
    cancelled write). ``ledger`` is the shard the pledge added to."""

    tenant: str
    idempotency_key: str
    claim: Claim | None
    pledge: Pledge | None
    ledger: LedgerShard | None
    cases: tuple[Case, ...]
    events: tuple[AuditRow, ...]
    requests: tuple[IntakeRequest, ...] = ()

    @property
    def intent_id(self) -> str:
        return intent_id_for(self.tenant, self.idempotency_key)

    @property
    def recorded_request(self) -> PledgeRequest | None:
        """What the key holds: the recorded pledge's fields, else the claim's request
        (a claim not yet committed), else nothing."""
        if self.pledge is not None:
            return PledgeRequest.from_normalised(self.pledge.normalised_request())
        if self.claim is not None and self.claim.request:
            try:
                return PledgeRequest.from_normalised(self.claim.request)
            except (KeyError, ArithmeticError, ValueError, TypeError):
                return None
        return None

    @property
    def answers(self) -> tuple[LoggedAnswer, ...]:
        """The request log, each refused reuse of the key with its fields beside the
        key's own."""
        recorded = self.recorded_request
        return tuple(
            LoggedAnswer(r, asked_fields(r.asked, recorded) if r.asked else ())
            for r in self.requests
        )


@dataclass(frozen=True)
class AskedField:
    """One field of a request that reused a key, beside what the key recorded (empty:
    nothing is recorded under the key any more)."""

    label: str
    asked: str
    recorded: str

    @property
    def differs(self) -> bool:
        return bool(self.recorded) and self.asked != self.recorded


@dataclass(frozen=True)
class LoggedAnswer:
    """One answer of the request log, and for a key reused with another body what that
    request asked for, field by field."""

    entry: IntakeRequest
    asked: tuple[AskedField, ...] = ()


ASKED_LABELS = (
    ("amount", "Amount"),
    ("currency", "Currency"),
    ("fund", "Fund"),
    ("donor_ref", "Donor ref"),
)


def asked_fields(asked: PledgeRequest, recorded: PledgeRequest | None) -> tuple[AskedField, ...]:
    """``asked`` field by field beside ``recorded``, both in canonical form (amounts with
    their currency's places, so 25 and 25.00 USD read the same)."""
    mine = asked.normalised()
    theirs = recorded.normalised() if recorded else {}
    return tuple(AskedField(label, mine[k], theirs.get(k, "")) for k, label in ASKED_LABELS)


def pledge_detail(*, tenant: str, idempotency_key: str, store: Store) -> PledgeDetail | None:
    """Everything stored for ``tenant``'s key in its home region ``store``, or None when
    neither a claim, a pledge nor a logged request exists (the page answers 404).
    Consistent GetItems of the claim, the pledge and its ledger shard; the cases by the
    ``by_intent`` Query; the pledge's audit stream and the key's request log by one
    Query each. A key refused before anything was written (422 key reuse, 400 unknown
    fund) has a page through its request log alone."""
    intent_id = intent_id_for(tenant, idempotency_key)
    claim = ClaimRepository(store).get(
        claim_pk(tenant, OPERATION_CREATE_PLEDGE, idempotency_key), consistent=True
    )
    pledge = PledgeRepository(store).get(intent_id, consistent=True)
    requests = tuple(requests_for_key(tenant, idempotency_key, store=store))
    if claim is None and pledge is None and not requests:
        return None
    ledger = LedgerRepository(store).shard(pledge.ledger_key) if pledge else None
    events = AuditRepository(store).stream_events(pledge_stream(intent_id, store.tag))
    return PledgeDetail(
        tenant=tenant,
        idempotency_key=idempotency_key,
        claim=claim,
        pledge=pledge,
        ledger=ledger,
        cases=tuple(cases_for_intent(intent_id, store=store)),
        events=tuple(AuditRow.from_event(e) for e in events),
        requests=requests,
    )
