"""The hands of ``explore_faults --actors 2`` and the world they meet: one schedule's
intent (:class:`World`), every hand of the catalogue (docs/architecture.md, "Many hands on
one case"), which pairs of them can meet, and the prelude that puts the world where a
pair finds it.

The catalogue: the original worker (its commit inside its lease), the late worker (the
same commit after its lease ran out), the client's retry (the same request again), the
sweep, the open-case re-check, the RETRY_COMMIT task (twice: Celery's redelivery), each
disposition and override request the case page offers a finance person
(``policy.offered_actions``, read on the page at the time), a RETRY_COMMIT posted and a
finished retry redelivered while a RELEASE_CLAIM awaits a supervisor (the late
retry's other hand), a supervisor's approval or rejection of a pending RELEASE_CLAIM,
the expiry of that request, the cases backfill, and the acknowledgement's hands: the dispatcher
(``acks_dispatch_once``, sending to the world's in-process receiver, :mod:`.receiver`),
a second dispatcher over a recorded pledge, a third that keeps to its fair share of the
shards by the dispatchers' roster, and a supervisor approving a VOID_PLEDGE (so
``pledge.voided`` is due).

The prelude puts the world where the pair's two hands find it: the worker's claim, then as
the pair needs, the lease run out, the sweep's STUCK_PENDING case, a queued RETRY_COMMIT, a
pending RELEASE_CLAIM request; or the pledge recorded with its answer lost (its
AMBIGUOUS_TIMEOUT case), and a VOID_PLEDGE pending on that case.
"""

from __future__ import annotations

import contextlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from django.conf import settings

from reconciliation import clock
from reconciliation.acks.dispatch import Dispatcher, acks_dispatch_once
from reconciliation.acks.models import Endpoint
from reconciliation.acks.roster import Roster
from reconciliation.acks.shard_lease import ShardLeases
from reconciliation.actors import Actor, Role
from reconciliation.cases.actions import ActionResult, StaffAction
from reconciliation.cases.backfill import cases_backfill
from reconciliation.cases.changes import CaseError
from reconciliation.cases.models import Case, retry_in_flight
from reconciliation.cases.policy import allowed_actions, offered_actions
from reconciliation.cases.repository import CaseRepository
from reconciliation.cases.vocabulary import (
    CaseAction,
    CaseState,
    CaseType,
    Disposition,
    Override,
    ReasonCode,
)
from reconciliation.casework.dispositions import case_dispose
from reconciliation.casework.evidence import evidence_facts
from reconciliation.casework.overrides import (
    override_approve,
    override_reject,
    override_request,
    overrides_expire,
)
from reconciliation.casework.retries import retry_commit_run
from reconciliation.casework.sweeps import recheck_open_cases, sweep_claim, sweep_claims_and_cases
from reconciliation.claims import intake
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimBody,
    ClaimKey,
    claim_pk,
    intent_id_for,
    pledge_home,
)
from reconciliation.claims.outcomes import IntakeOutcome
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository
from reconciliation.claims.request import PledgeRequest
from reconciliation.simulation.explorer.receiver import Receiver
from reconciliation.simulation.explorer.vocabulary import BODY, TENANT
from reconciliation.simulation.explorer.wire import HandsWire
from reconciliation.simulation.hands_invariants import ClientAnswer
from reconciliation.stores import Store, case_store, every_store, home_store

if TYPE_CHECKING:
    from reconciliation.acks.dispatch import DispatchReport
    from reconciliation.cases.backfill import BackfillReport
    from reconciliation.casework.retries import RetryOutcome
    from reconciliation.casework.sweeps import SweepReport

STAFF = Actor(username="hands-staff", role=Role.FINANCE_STAFF, email="staff@example.org")
REQUESTER = Actor(username="hands-requester", role=Role.FINANCE_STAFF, email="req@example.org")
SUPERVISOR = Actor(username="hands-supervisor", role=Role.SUPERVISOR, email="sup@example.org")
CLIENT = Actor(username="api", role=Role.API)
REASON = "Explorer: two hands act on this case at once."


class Stage(Enum):
    """What a prelude sets up before a pair's hands run, in this order."""

    EXPIRED = "the claim's lease ran out"
    CASE = "the sweep opened the STUCK_PENDING case"
    RETRY = "a RETRY_COMMIT is queued"
    ENDED = "a retry was asked, ran and ended (its commit throttled)"
    OVERRIDE = "a RELEASE_CLAIM awaits a supervisor"
    # The worker's commit applied and its answer was lost: the pledge is recorded (its
    # acknowledgement due) and its AMBIGUOUS_TIMEOUT case is the world's case.
    RECORDED = "the pledge is recorded, its answer lost (an AMBIGUOUS_TIMEOUT case)"
    VOID = "a VOID_PLEDGE of the recorded pledge awaits a supervisor"


# Stages one world cannot hold together: a recorded pledge leaves no stuck claim to
# retry or release, and a case holds one pending request at a time.
CONFLICTS = (
    frozenset({Stage.RECORDED, Stage.VOID}),
    frozenset({Stage.RETRY, Stage.ENDED, Stage.OVERRIDE}),
)


@dataclass
class World:
    """One schedule's intent and what its prelude set up."""

    key: str
    store: Store
    clock: contextlib.ExitStack
    claim: object = None  # the worker's Claim, as it holds it
    case_id: str = ""
    retry_request: str | None = None
    override_request: str | None = None
    answers: list[ClientAnswer] = field(default_factory=list)
    receiver: Receiver = field(default_factory=Receiver)

    @property
    def pk(self) -> str:
        return claim_pk(TENANT, OPERATION_CREATE_PLEDGE, self.key)

    @property
    def intent_id(self) -> str:
        return intent_id_for(TENANT, self.key)

    def advance(self, seconds: int) -> None:
        self.clock.enter_context(clock.travel(seconds))


def _request() -> PledgeRequest:
    return PledgeRequest.from_normalised(BODY)


def _answer(world: World, name: str, outcome: IntakeOutcome) -> str:
    world.answers.append(ClientAnswer(name, outcome.kind))
    return str(outcome.kind)


def _worker(world: World, name: str) -> str:
    return _answer(world, name, intake.pledge_commit(world.store, world.claim))  # type: ignore[arg-type]


def _client(world: World, name: str) -> str:
    outcome = intake.pledge_submit(
        pledge_home(TENANT, world.key),
        tenant=TENANT,
        idempotency_key=world.key,
        request=_request(),
        actor=CLIENT,
    )
    return _answer(world, name, outcome)


def _sweep(world: World, name: str) -> SweepReport:
    return sweep_claims_and_cases(every_store(), home=home_store, grace_s=0)


def _recheck(world: World, name: str) -> SweepReport:
    return recheck_open_cases(world.store)


def _retry(world: World, name: str) -> RetryOutcome:
    return _retry_run(world, world.retry_request)


def _page_offers(world: World, action: CaseAction) -> Case | None:
    """The case page as a person loads it: the case and the evidence it shows (consistent
    reads); the case if ``action`` is offered on it, else ``None``."""
    case = CaseRepository(world.store).get(world.case_id)
    if case is None:
        return None
    pledge = PledgeRepository(world.store).get(case.intent_id, consistent=True)
    claim = ClaimRepository(world.store).get(case.claim_pk)
    facts = evidence_facts(case=case, pledge=pledge, claim=claim)
    offered = offered_actions(
        case.case_type, case.state, STAFF.role, facts, retry_running=retry_in_flight(case)
    )
    return case if action in offered else None


def _staff(action: CaseAction) -> Callable[[World, str], str]:
    def act(world: World, name: str) -> str:
        case = _page_offers(world, action)
        if case is None:
            return "not offered"
        staff = StaffAction(
            actor=STAFF,
            reason_code=ReasonCode.TRANSIENT_FAILURE,
            reason_text=REASON,
            seen_version=case.version,
            action_id=f"hands-{name}-{world.key}",
        )
        try:
            if isinstance(action, Override):
                return override_request(
                    case_id=world.case_id, override=action, staff=staff, store=world.store
                ).message
            return case_dispose(
                case_id=world.case_id,
                disposition=action,
                staff=staff,
                store=world.store,
            ).message
        except CaseError as exc:
            return f"refused: {exc}"  # the 409 page; nothing to do again

    return act


def _asked_retry(world: World, name: str) -> str:
    """The retry's hand in the race with a release: while the supervisor decides the pending
    RELEASE_CLAIM, staff post RETRY_COMMIT from a page loaded before the request was asked
    (no page filter, no seen version: the post decides on the case as read now), and the
    queue delivers the earlier retry's message again (its request ran and ended; prelude
    ``Stage.ENDED``), then the retry the post asked for, if it was accepted."""
    try:
        asked = _ask_retry(world, f"hands-{name}-{world.key}")
    except CaseError:
        asked = None
    outcomes = [_retry_run(world, world.retry_request).kind]
    if asked is not None:
        outcomes.append(_retry_run(world, asked).kind)
    return f"{'asked' if asked else 'refused'}; retry {', '.join(outcomes)}"


def _ask_retry(world: World, action_id: str) -> str | None:
    """Staff post RETRY_COMMIT on the case as read now (no seen version): the request id
    the case then carries, or ``None``."""
    result = case_dispose(
        case_id=world.case_id,
        disposition=Disposition.RETRY_COMMIT,
        staff=StaffAction(
            actor=STAFF,
            reason_code=ReasonCode.TRANSIENT_FAILURE,
            reason_text=REASON,
            seen_version=None,
            action_id=action_id,
        ),
        store=world.store,
    )
    return result.case.retry.request_id if result.case.retry else None


def _retry_run(world: World, request_id: str | None) -> RetryOutcome:
    return retry_commit_run(world.case_id, store=case_store(world.case_id), request_id=request_id)


def _pending_request(world: World) -> str | None:
    """The request a supervisor decides: the prelude's, or (when the pair also holds a
    queued retry, which no override may be asked beside) one asked for now."""
    if world.override_request is None:
        _request_release(world)
    return world.override_request


def _decide(approve: bool) -> Callable[[World, str], str]:
    def act(world: World, name: str) -> str:
        request_id = _pending_request(world)
        if request_id is None:
            return "no request"
        decide = override_approve if approve else override_reject
        try:
            return decide(
                case_id=world.case_id,
                request_id=request_id,
                staff=StaffAction(
                    actor=SUPERVISOR,
                    reason_code=ReasonCode.TRANSIENT_FAILURE,
                    reason_text=REASON,
                    action_id=f"hands-{name}-{world.key}",
                ),
                store=world.store,
            ).message
        except CaseError as exc:
            return f"refused: {exc}"

    return act


def _expire(world: World, name: str) -> list[str]:
    if _pending_request(world) is None:
        return []
    world.advance(settings.OVERRIDE_TTL_S + 1)  # time passes, for every hand alike
    return overrides_expire(store=world.store)


def _backfill(world: World, name: str) -> BackfillReport:
    return cases_backfill(world.store)


# The tenant's one endpoint, subscribed to every event. Loopback, and never connected
# to: the dispatcher's sender is the in-process receiver (receiver.py).
ENDPOINT = Endpoint(
    "explorer-hooks", TENANT, "http://127.0.0.1:9/explorer-hooks", "whsec_" + "A" * 32
)


def endpoints_for(tenant: str) -> list[Endpoint]:
    return [ENDPOINT] if tenant == TENANT else []


def _loopback(_host: str, _port: int) -> list[str]:
    return ["127.0.0.1"]


def dispatch_pass(world: World) -> DispatchReport:
    """One pass of the acknowledgement dispatcher over the world's pledge (a pledge of an
    earlier schedule is no part of this world), sending to the world's receiver."""
    return acks_dispatch_once(
        world.store,
        endpoints_for=endpoints_for,
        rng=random.Random(0),
        resolve=_loopback,
        sender=world.receiver,
        owns=lambda intent_id: intent_id == world.intent_id,
        # Every send and record in the hand's own thread: each call a point of its
        # schedule (a pool's workers are no hand, and would run out of turn).
        workers=0,
    )


def _dispatch(world: World, name: str) -> str:
    return dispatch_pass(world).line()


def _dispatch_shared(world: World, name: str) -> str:
    """A dispatcher that keeps to its fair share (its heartbeat in the region's roster,
    reconciliation/acks/roster.py), as ``dispatch_acks`` runs: the roster's writes and
    reads are points of its schedule beside the other hand's lease and record."""
    leases = ShardLeases(world.store, owner=name)
    dispatcher = Dispatcher(
        world.store,
        endpoints_for=endpoints_for,
        leases=leases,
        roster=Roster(world.store, owner=name, ttl_s=settings.ACK_LEASE_S),
        workers=0,  # in the hand's thread, as dispatch_pass
        rng=random.Random(0),
        resolve=_loopback,
        sender=world.receiver,
        owns=lambda intent_id: intent_id == world.intent_id,
    )
    try:
        dispatcher.run_pass()
    finally:
        dispatcher.close()
    leases.release()
    return dispatcher.take_report().line()


@dataclass(frozen=True)
class ActorSpec:
    name: str
    work: Callable[[World, str], object]
    needs: frozenset[Stage] = frozenset()
    within_lease: bool = False  # only before the claim's lease runs out
    faulted_reads: bool = False  # its reads are faulted too (throttled past the budget)
    acks: bool = False  # an acknowledgement hand (``--per-pair-acks``)


def catalogue() -> list[ActorSpec]:
    """Every hand, in the order the command lists them."""
    staff = allowed_actions(CaseType.STUCK_PENDING, CaseState.OPEN, Role.FINANCE_STAFF)
    return [
        ActorSpec("original", _worker, within_lease=True),
        # The worker stalled past its lease comes back after the sweep opened its case.
        ActorSpec("late", _worker, frozenset({Stage.CASE})),
        ActorSpec("client", _client),
        ActorSpec("sweep", _sweep, frozenset({Stage.EXPIRED})),
        ActorSpec("recheck", _recheck, frozenset({Stage.CASE})),
        ActorSpec("retry", _retry, frozenset({Stage.RETRY})),
        ActorSpec("retry2", _retry, frozenset({Stage.RETRY})),
        *(ActorSpec(f"staff:{a}", _staff(a), frozenset({Stage.CASE})) for a in staff),
        # A RETRY_COMMIT asked for, and run, while a RELEASE_CLAIM awaits a supervisor.
        ActorSpec("asked-retry", _asked_retry, frozenset({Stage.ENDED, Stage.OVERRIDE})),
        ActorSpec("approve", _decide(True), frozenset({Stage.OVERRIDE})),
        ActorSpec("reject", _decide(False), frozenset({Stage.OVERRIDE})),
        ActorSpec("expire", _expire, frozenset({Stage.OVERRIDE})),
        ActorSpec("backfill", _backfill),
        # The acknowledgement dispatcher (reconciliation/acks/dispatch.py): one meets every
        # hand on whatever its pledge is; two at once meet over a recorded pledge.
        ActorSpec("dispatch", _dispatch, faulted_reads=True, acks=True),
        ActorSpec(
            "dispatch2", _dispatch, frozenset({Stage.RECORDED}), faulted_reads=True, acks=True
        ),
        # A dispatcher sharing the shards by the roster (dispatch_acks's way), beside them.
        ActorSpec(
            "dispatch-shared",
            _dispatch_shared,
            frozenset({Stage.RECORDED}),
            faulted_reads=True,
            acks=True,
        ),
        # A supervisor approves the VOID_PLEDGE: pledge.voided becomes due.
        ActorSpec("approve-void", _decide(True), frozenset({Stage.VOID}), acks=True),
    ]


def pairs(specs: list[ActorSpec]) -> list[tuple[ActorSpec, ActorSpec]]:
    """Every pair of the catalogue whose preludes agree (the original worker runs inside
    its lease; a hand that needs it run out cannot meet it)."""
    out = []
    for a, b in itertools.combinations(specs, 2):
        needs = a.needs | b.needs
        if (a.within_lease or b.within_lease) and needs:
            continue
        if any(needs & one and needs & other for one, other in itertools.permutations(CONFLICTS)):
            continue
        out.append((a, b))
    return out


def _ask_override(world: World, override: Override, reason_code: ReasonCode) -> ActionResult:
    """The requester asks for ``override`` on the world's case (a supervisor decides)."""
    return override_request(
        case_id=world.case_id,
        override=override,
        staff=StaffAction(
            actor=REQUESTER, reason_code=reason_code, reason_text=REASON, seen_version=None
        ),
        store=world.store,
    )


def _request_release(world: World) -> None:
    try:
        result = _ask_override(world, Override.RELEASE_CLAIM, ReasonCode.TRANSIENT_FAILURE)
    except CaseError:
        return  # refused (a retry in flight, a pledge recorded): nothing to decide
    world.override_request = result.case.override.request_id if result.case.override else None


def _record_answer_lost(world: World, wire: HandsWire) -> None:
    """The worker's commit applies and every answer to it is lost (the write, then its
    retries throttled past the budget): the pledge is recorded, the intake opens the
    AMBIGUOUS_TIMEOUT case, and the world's case is that one."""
    wire.start(("rest commit#1", "lost_then_throttle"))
    try:
        outcome = intake.pledge_commit(world.store, world.claim)  # type: ignore[arg-type]
    finally:
        wire.start(None)
    assert outcome.case_id, f"the lost commit opened its case ({outcome.kind})"
    world.case_id = outcome.case_id


def _request_void(world: World) -> None:
    result = _ask_override(world, Override.VOID_PLEDGE, ReasonCode.DONOR_REQUEST)
    assert result.case.override is not None, "the VOID_PLEDGE request is pending"
    world.override_request = result.case.override.request_id


def prelude(world: World, needs: frozenset[Stage], wire: HandsWire) -> None:
    """Put the world where the pair's hands find it."""
    repo = ClaimRepository(world.store)
    attempt = repo.new_claim(
        key=ClaimKey(world.pk, TENANT, world.key, world.intent_id),
        body=ClaimBody(_request().payload_hash, _request().normalised()),
        correlation_id=f"hands-worker-{world.key}",
        client_address="",
    )
    world.claim = repo.create(attempt)
    if needs & {Stage.RECORDED, Stage.VOID}:
        _record_answer_lost(world, wire)
        if needs & {Stage.EXPIRED, Stage.CASE}:
            world.advance(settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1)
        if Stage.VOID in needs:
            _request_void(world)
        return
    if needs & {Stage.EXPIRED, Stage.CASE, Stage.RETRY, Stage.ENDED, Stage.OVERRIDE}:
        world.advance(settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1)
    if needs & {Stage.CASE, Stage.RETRY, Stage.ENDED, Stage.OVERRIDE}:
        case = sweep_claim(world.pk, grace_s=0, store=world.store)
        assert case is not None, "the expired claim was swept into a case"
        world.case_id = case.case_id
    if Stage.RETRY in needs or Stage.ENDED in needs:
        world.retry_request = _ask_retry(world, f"hands-prelude-retry-{world.key}")
    if Stage.ENDED in needs and Stage.RETRY not in needs:
        # The retry runs once and ends: its commit throttled past the budget (the wire's
        # fault), so the case stays open with a finished retry, and a release may be asked.
        wire.start(("rest commit#1", "throttle_exhausted"))
        try:
            _retry_run(world, world.retry_request)
        finally:
            wire.start(None)
    if Stage.OVERRIDE in needs and Stage.RETRY not in needs:
        _request_release(world)
