"""``explore_faults --actors 2``: two hands of the catalogue on one intent and its case,
interleaved at every DynamoDB call point under a pre-emption bound
(:mod:`.schedule`), with depth-1 faults at every write of the serial schedules, and the
invariants of :mod:`reconciliation.ops.hands_invariants` checked at rest.

The catalogue (docs/architecture.md, "Many hands on one case"): the original worker
(its commit inside its lease), the late worker (the same commit after its lease ran out),
the client's retry (the same request again), the sweep, the open-case re-check, the
RETRY_COMMIT task (twice: Celery's redelivery), each disposition and override request the
case page offers a finance person (``policy.offered_actions``, read on the page at the
time), a RETRY_COMMIT posted and a finished retry redelivered while a RELEASE_CLAIM
awaits a supervisor (defect 3's other hand), a supervisor's approval or rejection of a
pending RELEASE_CLAIM, the expiry of that request, and the cases backfill.

Every schedule runs on a fresh intent (its own key) in the same tables. Its prelude puts
the world where its two hands find it: the worker's claim, then as the pair needs, the
lease run out, the sweep's STUCK_PENDING case, a queued RETRY_COMMIT, a pending
RELEASE_CLAIM request. Then the hands run, one at a time, as the schedule says; then, at
rest, a last re-check runs and the invariants are checked on the intent's own items. The
intent's claim and cases are removed afterwards so no later sweep or queue walk meets
them; its pledge stays, and the ledger is checked against all pledges once, at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from unittest import mock

from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError
from django.conf import settings
from django.test.utils import override_settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.cases.changes import CaseError
from reconciliation.cases.models import CaseType, Disposition, Override, retry_in_flight
from reconciliation.cases.policy import OVERRIDES, allowed_actions, offered_actions
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    claim_pk,
    intent_id_for,
)
from reconciliation.claims.outcomes import IntakeOutcome
from reconciliation.claims.request import PledgeRequest
from reconciliation.dynamo import faults
from reconciliation.dynamo.batch import batch_writer
from reconciliation.dynamo.client import (
    TableNames,
    build_client,
    dynamodb_client,
    regions,
    reset_clients,
)
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.retry import RetriesExhausted
from reconciliation.dynamo.tables import drop_tables, ensure_tables
from reconciliation.ops.explorer.schedule import (
    BOUND,
    Child,
    Decision,
    Frontier,
    Hand,
    ScheduleStuck,
    Turns,
    children,
    level_quotas,
    marked_children,
    preemptions,
    run_schedule,
    sample_level,
)
from reconciliation.ops.explorer.session import _quiet_logs, _simulated_waits, explorer_engine
from reconciliation.ops.explorer.vocabulary import (
    BODY,
    ERRORS,
    KINDS,
    MAY_HAVE_APPLIED,
    OWN_SHARD,
    TENANT,
)
from reconciliation.ops.explorer.wire import (
    answer_error,
    call_shape,
    cancelled_answer,
    table_roles,
    unfenced_writes,
)
from reconciliation.ops.hands_invariants import (
    ClientAnswer,
    answered_problems,
    decision_problems,
    last_answer_problems,
    late_case_problems,
    region_problems,
    resolution_evidence_problems,
    resolution_problems,
)
from reconciliation.ops.invariants import (
    ESCAPED,
    Problem,
    Snapshot,
    audit_problems,
    case_type_problems,
    fence_problems,
    ledger_problems,
    lost_problems,
)
from reconciliation.stores import Store, case_store, every_store, home_store, region_store

# The fault kinds tried at every write of the serial schedules: a write applied whose
# answer is lost, throttling past the budget, a transaction cancelled by a conflict, and
# the process dying right after the call.
HAND_FAULTS = ("timeout_after", "throttle_exhausted", "conflict", "crash_after")
STAFF = Actor(username="hands-staff", role=Role.FINANCE_STAFF, email="staff@example.org")
REQUESTER = Actor(username="hands-requester", role=Role.FINANCE_STAFF, email="req@example.org")
SUPERVISOR = Actor(username="hands-supervisor", role=Role.SUPERVISOR, email="sup@example.org")
CLIENT = Actor(username="api", role=Role.API)
REASON = "Explorer: two hands act on this case at once."

# Prelude stages, in the order they are set up.
EXPIRED, CASE, RETRY, OVERRIDE = "expired", "case", "retry", "override"
ENDED = "ended"  # a retry asked, run and ended (its commit throttled), before the request


# --- the wire ------------------------------------------------------------------------------


@dataclass
class HandCall:
    """One DynamoDB call of a schedule: who made it, its point, what became of it."""

    index: int
    hand: str  # "" for the prelude and the checks at rest
    point: str
    label: str
    write: bool
    case_open: tuple[str, str] | None = None
    unfenced: tuple[str, ...] = ()
    fault: str | None = None
    status: int | None = None


class HandsWire:
    """The ``before-send`` hook: names each call by its hand, yields the turn to the
    scheduler before it, applies the schedule's one fault, and sends the rest."""

    def __init__(self, names: TableNames, turns: Turns):
        import socket

        from botocore.httpsession import URLLib3Session

        self.roles = table_roles(names)
        self.turns = turns
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self.session = URLLib3Session(timeout=10, max_pool_connections=4, socket_options=nodelay)
        self.start(None)

    def start(self, fault: tuple[str, str] | None) -> None:
        self.fault = fault  # (point, kind)
        self.fired = False
        self.calls: list[HandCall] = []
        self._counts: dict[tuple[str, str], int] = {}
        self._exhausted: set[tuple[str, str]] = set()

    def __call__(self, request, event_name: str = "", **_kwargs):
        operation = event_name.rsplit(".", 1)[-1]
        raw = request.body or b"{}"
        raw = raw.encode() if isinstance(raw, str) else raw
        body = json.loads(raw)
        shape = call_shape(operation, body, self.roles, OWN_SHARD)
        hand = self.turns.current_hand()
        name = hand.name if hand else ""
        count = self._counts[(name, shape.label)] = self._counts.get((name, shape.label), 0) + 1
        point = f"{name or 'rest'} {shape.label}#{count}"
        if hand is not None and shape.label != "pending query other":
            # The other fifteen pending shards never hold a schedule's claim (OWN_SHARD):
            # no other hand's write can change what they answer.
            self.turns.yield_point(point, write=shape.write)
        call = HandCall(len(self.calls), name, point, shape.label, shape.write, shape.case_open)
        call.unfenced = unfenced_writes(operation, body, self.roles)
        self.calls.append(call)
        digest = (name, hashlib.sha256(raw).hexdigest())
        if self.fault and not self.fired and self.fault[0] == point:
            self.fired = True
            call.fault = self.fault[1]
            return self._inject(request, call, shape, digest)
        if digest in self._exhausted:
            call.fault = "throttled"
            return answer_error(request, *ERRORS["throttle"])
        return self._send(request, call)

    def _inject(self, request, call: HandCall, shape, digest):
        kind = KINDS[call.fault or ""]
        response = self._send(request, call) if kind.sends else None
        if kind.exhausts:
            self._exhausted.add(digest)
        if kind.outcome == "timeout":
            raise ReadTimeoutError(endpoint_url=request.url)
        if kind.outcome == "crash":
            raise faults.SimulatedCrash(f"explore_faults: {call.point} died after the call")
        if kind.outcome == "conflict" and shape.items:
            return cancelled_answer(request, shape.items, {shape.items[shape.hot]})
        if response is not None:
            return response
        return answer_error(request, *ERRORS[kind.outcome])

    def _send(self, request, call: HandCall):
        response = self.session.send(request)
        call.status = response.status_code
        return response


# --- the world of one schedule -----------------------------------------------------------


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
    world.answers.append(ClientAnswer(name, str(outcome.kind)))
    return str(outcome.kind)


def _worker(world: World, name: str) -> str:
    from reconciliation.claims import intake

    return _answer(world, name, intake.pledge_commit(world.store, world.claim))  # type: ignore[arg-type]


def _client(world: World, name: str) -> str:
    from reconciliation.claims import intake

    outcome = intake.pledge_submit(
        tenant=TENANT, idempotency_key=world.key, request=_request(), actor=CLIENT
    )
    return _answer(world, name, outcome)


def _sweep(world: World, name: str):
    from reconciliation.casework.sweeps import sweep_claims_and_cases

    return sweep_claims_and_cases(every_store(), home=home_store, grace_s=0)


def _recheck(world: World, name: str):
    from reconciliation.casework.sweeps import recheck_open_cases

    return recheck_open_cases(world.store)


def _retry(world: World, name: str):
    from reconciliation.casework.retries import retry_commit_run

    return retry_commit_run(
        world.case_id, store=case_store(world.case_id), request_id=world.retry_request
    )


def _page_offers(world: World, action: str) -> tuple[object, bool]:
    """The case page as a person loads it: the case and the evidence it shows (consistent
    reads), and whether ``action`` is offered on it."""
    from reconciliation.cases.repository import CaseRepository
    from reconciliation.casework.evidence import evidence_facts
    from reconciliation.claims.pledges import PledgeRepository
    from reconciliation.claims.repository import ClaimRepository

    case = CaseRepository(world.store).get(world.case_id)
    if case is None:
        return None, False
    pledge = PledgeRepository(world.store).get(case.intent_id, consistent=True)
    claim = ClaimRepository(world.store).get(case.claim_pk)
    facts = evidence_facts(case=case, pledge=pledge, claim=claim)
    offered = offered_actions(
        case.case_type, case.state, STAFF.role, facts, retry_running=retry_in_flight(case)
    )
    return case, action in offered


def _staff(action: str) -> Callable[[World, str], str]:
    def act(world: World, name: str) -> str:
        from reconciliation.casework.dispositions import case_dispose
        from reconciliation.casework.overrides import override_request

        case, offered = _page_offers(world, action)
        if not offered or case is None:
            return "not offered"
        common = dict(
            case_id=world.case_id,
            actor=STAFF,
            seen_version=case.version,  # type: ignore[attr-defined]
            reason_code="TRANSIENT_FAILURE",
            reason_text=REASON,
            action_id=f"hands-{name}-{world.key}",
            store=world.store,
        )
        try:
            if action in OVERRIDES:
                return override_request(override=action, **common).message
            return case_dispose(disposition=action, **common).message
        except CaseError as exc:
            return f"refused: {exc}"  # the 409 page; nothing to do again

    return act


def _asked_retry(world: World, name: str) -> str:
    """Defect 3's other hand: while the supervisor decides the pending RELEASE_CLAIM,
    staff post RETRY_COMMIT from a page loaded before the request was asked (no page
    filter, no seen version: the post decides on the case as read now), and the queue
    delivers the earlier retry's message again (its request ran and ended; prelude
    ``ENDED``), then the retry the post asked for, if it was accepted."""
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
    from reconciliation.casework.dispositions import case_dispose

    result = case_dispose(
        case_id=world.case_id,
        disposition=Disposition.RETRY_COMMIT,
        actor=STAFF,
        seen_version=None,
        reason_code="TRANSIENT_FAILURE",
        reason_text=REASON,
        action_id=action_id,
        store=world.store,
    )
    return (result.case.retry or {}).get("request_id")


def _retry_run(world: World, request_id: str | None):
    from reconciliation.casework.retries import retry_commit_run

    return retry_commit_run(world.case_id, store=case_store(world.case_id), request_id=request_id)


def _pending_request(world: World) -> str | None:
    """The request a supervisor decides: the prelude's, or (when the pair also holds a
    queued retry, which no override may be asked beside) one asked for now."""
    if world.override_request is None:
        _request_release(world)
    return world.override_request


def _decide(approve: bool) -> Callable[[World, str], str]:
    def act(world: World, name: str) -> str:
        from reconciliation.casework.overrides import override_approve, override_reject

        request_id = _pending_request(world)
        if request_id is None:
            return "no request"
        decide = override_approve if approve else override_reject
        try:
            return decide(
                case_id=world.case_id,
                request_id=request_id,
                actor=SUPERVISOR,
                reason_code="TRANSIENT_FAILURE",
                reason_text=REASON,
                action_id=f"hands-{name}-{world.key}",
                store=world.store,
            ).message
        except CaseError as exc:
            return f"refused: {exc}"

    return act


def _expire(world: World, name: str) -> list[str]:
    from reconciliation.casework.overrides import overrides_expire

    if _pending_request(world) is None:
        return []
    world.advance(settings.OVERRIDE_TTL_S + 1)  # time passes, for every hand alike
    return overrides_expire(store=world.store)


def _backfill(world: World, name: str):
    from reconciliation.cases.backfill import cases_backfill

    return cases_backfill(world.store)


@dataclass(frozen=True)
class ActorSpec:
    name: str
    work: Callable[[World, str], object]
    needs: frozenset[str] = frozenset()
    within_lease: bool = False  # only before the claim's lease runs out


def catalogue() -> list[ActorSpec]:
    """Every hand, in the order the command lists them."""
    staff = allowed_actions(CaseType.STUCK_PENDING, "OPEN", Role.FINANCE_STAFF)
    return [
        ActorSpec("original", _worker, within_lease=True),
        # The worker stalled past its lease comes back after the sweep opened its case.
        ActorSpec("late", _worker, frozenset({CASE})),
        ActorSpec("client", _client),
        ActorSpec("sweep", _sweep, frozenset({EXPIRED})),
        ActorSpec("recheck", _recheck, frozenset({CASE})),
        ActorSpec("retry", _retry, frozenset({RETRY})),
        ActorSpec("retry2", _retry, frozenset({RETRY})),
        *(ActorSpec(f"staff:{a}", _staff(a), frozenset({CASE})) for a in staff),
        # A RETRY_COMMIT asked for, and run, while a RELEASE_CLAIM awaits a supervisor.
        ActorSpec("asked-retry", _asked_retry, frozenset({ENDED, OVERRIDE})),
        ActorSpec("approve", _decide(True), frozenset({OVERRIDE})),
        ActorSpec("reject", _decide(False), frozenset({OVERRIDE})),
        ActorSpec("expire", _expire, frozenset({OVERRIDE})),
        ActorSpec("backfill", _backfill),
    ]


def pairs(specs: list[ActorSpec]) -> list[tuple[ActorSpec, ActorSpec]]:
    """Every pair of the catalogue whose preludes agree (the original worker runs inside
    its lease; a hand that needs it run out cannot meet it)."""
    out = []
    for a, b in itertools.combinations(specs, 2):
        needs = a.needs | b.needs
        if (a.within_lease or b.within_lease) and needs:
            continue
        out.append((a, b))
    return out


def _request_release(world: World) -> None:
    from reconciliation.casework.overrides import override_request

    try:
        result = override_request(
            case_id=world.case_id,
            override=Override.RELEASE_CLAIM,
            actor=REQUESTER,
            seen_version=None,
            reason_code="TRANSIENT_FAILURE",
            reason_text=REASON,
            store=world.store,
        )
    except CaseError:
        return  # refused (a retry in flight, a pledge recorded): nothing to decide
    world.override_request = (result.case.override or {}).get("request_id")


def prelude(world: World, needs: frozenset[str], wire: HandsWire) -> None:
    """Put the world where the pair's hands find it."""
    from reconciliation.casework.sweeps import sweep_claim
    from reconciliation.claims.repository import ClaimRepository

    repo = ClaimRepository(world.store)
    attempt = repo.new_claim(
        pk=world.pk,
        tenant=TENANT,
        idempotency_key=world.key,
        intent_id=world.intent_id,
        payload_hash=_request().payload_hash,
        request=_request().normalised(),
        correlation_id=f"hands-worker-{world.key}",
        client_address="",
    )
    world.claim = repo.create(attempt)
    if needs & {EXPIRED, CASE, RETRY, ENDED, OVERRIDE}:
        world.advance(settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1)
    if needs & {CASE, RETRY, ENDED, OVERRIDE}:
        case = sweep_claim(world.pk, grace_s=0, store=world.store)
        world.case_id = case.case_id
    if RETRY in needs or ENDED in needs:
        world.retry_request = _ask_retry(world, f"hands-prelude-retry-{world.key}")
    if ENDED in needs and RETRY not in needs:
        # The retry runs once and ends: its commit throttled past the budget (the wire's
        # fault), so the case stays open with a finished retry, and a release may be asked.
        wire.start(("rest commit#1", "throttle_exhausted"))
        try:
            _retry_run(world, world.retry_request)
        finally:
            wire.start(None)
    if OVERRIDE in needs and RETRY not in needs:
        _request_release(world)


# --- one schedule ------------------------------------------------------------------------


@dataclass
class ScheduleResult:
    pair: tuple[str, str]
    prefix: tuple[str, ...]
    fault: tuple[str, str] | None
    decisions: list[Decision] = field(default_factory=list)
    calls: list[HandCall] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def preemptions(self) -> int:
        return preemptions(self.decisions)

    def label(self) -> str:
        choices = ",".join(d.chosen for d in self.decisions)
        fault = f" fault {self.fault[0]}:{self.fault[1]}" if self.fault else ""
        return f"{self.pair[0]}×{self.pair[1]} [{choices}]{fault}"


class HandsSession:
    """The tables, hooks and settings of one ``--actors 2`` exploration."""

    def __init__(self, *, endpoint_url: str, prefix: str, seed: int = 0):
        self.endpoint_url = endpoint_url
        self.names = TableNames.from_prefix(prefix)
        self.seed = seed
        self.turns = Turns()
        self._stack = contextlib.ExitStack()
        self._keys = itertools.count()

    def __enter__(self) -> HandsSession:
        try:
            self._open(self._stack)
        except BaseException:
            self._stack.close()
            raise
        return self

    def _open(self, stack: contextlib.ExitStack) -> None:
        from reconciliation.casework.tasks import retry_commit_task

        stack.enter_context(
            override_settings(
                DYNAMODB_ENDPOINT_URL=self.endpoint_url,
                DDB_TABLE_PREFIX=self.names.idempotency_keys.removesuffix("idempotency_keys"),
                DDB_REGIONS="",
                FAULT_INJECTION="",
                DDB_APP_RETRY_BASE_S=0,
                # The re-check at rest must resolve what the evidence answers (invariant c).
                AUTO_RESOLVE_COMMITTED=True,
            )
        )
        stack.callback(reset_clients)
        stack.enter_context(_quiet_logs())
        stack.enter_context(_simulated_waits())
        # The retry task is one of the hands; queueing it sends nothing to a broker.
        stack.enter_context(mock.patch.object(retry_commit_task, "apply_async", _no_broker))
        faults.set_plan(None)
        reset_clients()
        self.oracle = build_client(regions()[0])
        ensure_tables(self.oracle, self.names)
        stack.callback(drop_tables, self.oracle, self.names)
        self.wire = HandsWire(self.names, self.turns)
        dynamodb_client().meta.events.register_first("before-send.dynamodb", self.wire)

    def __exit__(self, *exc_info) -> None:
        self._stack.close()

    def fresh_key(self) -> str:
        from reconciliation.claims.models import pending_shard

        while True:
            n = next(self._keys)
            base = hashlib.sha256(f"{self.seed}:hands:{n}".encode()).hexdigest()[:16]
            key = f"xh-{base}"
            if pending_shard(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)) == OWN_SHARD:
                return key

    def run(
        self,
        pair: tuple[ActorSpec, ActorSpec],
        prefix: tuple[str, ...] = (),
        fault: tuple[str, str] | None = None,
    ) -> ScheduleResult:
        started = time.monotonic()
        result = ScheduleResult((pair[0].name, pair[1].name), prefix, fault)
        with contextlib.ExitStack() as moved:
            key = self.fresh_key()
            world = World(key, home_store(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)), moved)
            self.wire.start(None)
            try:
                prelude(world, pair[0].needs | pair[1].needs, self.wire)
            except (Exception, faults.SimulatedCrash) as exc:
                result.problems.append(Problem("explorer", f"prelude failed: {exc!r}"[:300]))
                self._forget(world)
                return result
            self.wire.start(fault)
            hands = [Hand(self.turns, spec.name, _bind(spec, world)) for spec in pair]
            try:
                result.decisions, _followed = run_schedule(self.turns, hands, prefix)
            except ScheduleStuck as exc:
                result.problems.append(Problem("explorer", str(exc)))
                return result  # its threads are daemons; the session is left as it is
            result.calls = list(self.wire.calls)
            for hand in hands:
                result.outcomes[hand.name] = _outcome(hand)
                if hand.error is not None and not _tolerated(hand.error):
                    result.problems.append(
                        Problem(
                            ESCAPED, f"{hand.name}: {type(hand.error).__name__}: {hand.error}"[:300]
                        )
                    )
            self._mark_commits(world, result.calls)
            result.problems += self._at_rest(world, result.calls)
            self._forget(world)
        result.seconds = time.monotonic() - started
        return result

    def _mark_commits(self, world: World, calls: list[HandCall]) -> None:
        """What the wire knows of each client-facing hand's own commits."""
        for answer in world.answers:
            commits = [c for c in calls if c.hand == answer.actor and c.label == "commit"]
            answer.commit_applied = any(c.status == 200 for c in commits)
            answer.commit_maybe = any(c.fault in MAY_HAVE_APPLIED for c in commits)

    def _at_rest(self, world: World, calls: list[HandCall]) -> list[Problem]:
        from reconciliation.casework.sweeps import recheck_open_cases

        opens = [c for c in calls if c.case_open and c.status == 200]
        recorded_at = next(
            (c.index for c in calls if c.label == "commit" and c.status == 200), None
        )
        # A case opened by a hand whose own commit came after the pledge was recorded: it
        # met the pledge, and must answer from it (a replay), not open a case, whoever
        # resolved that case later. Narrowed to the hand's commit, not its case write: a
        # late worker whose commit was cancelled before the client's retry recorded the
        # pledge, and whose case write came after (it read the claim still PENDING in
        # between; two pre-emptions), opens a CANCELLED_TRANSACTION case about a recorded
        # intent; the re-check below resolves it, and the strict check after it holds
        # (docs/reliability.md, "A race left as designed").
        late = [
            c.case_open
            for c in opens
            if c.case_open is not None
            and recorded_at is not None
            and any(
                m.hand == c.hand and m.label == "commit" and recorded_at < m.index < c.index
                for m in calls
            )
        ]
        # Invariant c is judged after this re-check, in every schedule: one that fails or
        # leaves an error is reported, never taken as a re-check that ran.
        self.wire.start(None)
        rechecked: list[Problem] = []
        try:
            report = recheck_open_cases(world.store)
            rechecked += [
                Problem("explorer", f"re-check at rest: {e}"[:300]) for e in report.errors
            ]
        except (BotoCoreError, ClientError, CaseError) as exc:
            rechecked.append(Problem("explorer", f"re-check at rest failed: {exc!r}"[:300]))
        snapshot = self._items(world, calls)
        from reconciliation.cases.models import decoded_row

        cases = [decoded_row(i) for i in snapshot.raw["cases"]]
        pledges = snapshot.plain("pledges")
        streams = snapshot.streams()
        pledge_exists = any(p["intent_id"] == world.intent_id for p in pledges)
        released = any(
            (c.get("resolution") or {}).get("disposition") == Override.RELEASE_CLAIM for c in cases
        )
        # A claim still PENDING in the stuck-claim index is in flight, not lost: the worker
        # that holds it is no hand of this pair (its lease may still run), and the sweep
        # opens its case once the lease is over. Leaving the index without a case is
        # still reported (lost_problems' claim check).
        in_flight = any(
            c.get("status") == ClaimStatus.PENDING and c.get("pending_shard")
            for c in snapshot.plain("idempotency_keys")
        )
        lost = [
            p
            for p in lost_problems(snapshot, world.intent_id, [])
            # A released claim is the system's answer: the client may send it again.
            if not ((released or in_flight) and p.detail.startswith("not recorded"))
            # The client's own last word is judged by invariant e.
            and not (any(a.kind for a in world.answers) and p.detail.startswith("not recorded"))
        ]
        return [
            *rechecked,
            *resolution_problems(streams),
            *decision_problems(streams),
            *late_case_problems(late),
            *answered_problems(cases, pledges),
            *region_problems(self._recorded_by_region(world)),
            *last_answer_problems(world.answers, pledge_exists),
            *resolution_evidence_problems(cases, pledges),
            *lost,
            *case_type_problems(c.case_open for c in calls if c.case_open),
            *audit_problems(snapshot),
            *fence_problems((c.point, t) for c in calls for t in c.unfenced),
        ]

    def _recorded_by_region(self, world: World) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for region in regions():
            store = region_store(region)
            item = self.oracle.get_item(
                TableName=store.tables.pledges,
                Key={"intent_id": {"S": world.intent_id}},
                ConsistentRead=True,
            ).get("Item")
            out[region.name] = [world.intent_id] if item else []
        return out

    def _items(self, world: World, calls: list[HandCall]) -> Snapshot:
        """The intent's own items: its claim, pledge, cases and their audit streams."""
        get = self.oracle.get_item
        claim = get(
            TableName=self.names.idempotency_keys, Key={"pk": {"S": world.pk}}, ConsistentRead=True
        ).get("Item")
        pledge = get(
            TableName=self.names.pledges,
            Key={"intent_id": {"S": world.intent_id}},
            ConsistentRead=True,
        ).get("Item")
        case_ids = {world.case_id} - {""} | {c.case_open[0] for c in calls if c.case_open}
        query = self.oracle.get_paginator("query").paginate(
            TableName=self.names.cases,
            IndexName="by_intent",
            KeyConditionExpression="intent_id = :i",
            ExpressionAttributeValues={":i": {"S": world.intent_id}},
        )
        case_ids |= {i["case_id"]["S"] for page in query for i in page.get("Items", [])}
        cases = [
            item
            for cid in sorted(case_ids)
            if (
                item := get(
                    TableName=self.names.cases, Key={"case_id": {"S": cid}}, ConsistentRead=True
                ).get("Item")
            )
        ]
        streams = [f"CASE#{cid}" for cid in sorted(case_ids)]
        if pledge:
            from reconciliation.audit.regions import pledge_item_stream

            streams.append(pledge_item_stream(from_item(pledge)))
        events = [
            item
            for stream in streams
            for page in self.oracle.get_paginator("query").paginate(
                TableName=self.names.audit_events,
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "stream"},
                ExpressionAttributeValues={":s": {"S": stream}},
                ConsistentRead=True,
            )
            for item in page.get("Items", [])
        ]
        return Snapshot(
            raw={
                "idempotency_keys": [claim] if claim else [],
                "pledges": [pledge] if pledge else [],
                "cases": cases,
                "audit_events": events,
            }
        )

    def _forget(self, world: World) -> None:
        """Remove the intent's claim and cases (and their streams), so no later sweep or
        queue walk meets them; its pledge and receipt stay for the ledger check."""
        snapshot = self._items(world, self.wire.calls)
        removals = {
            self.names.idempotency_keys: [
                {"pk": i["pk"]} for i in snapshot.raw["idempotency_keys"]
            ],
            self.names.cases: [{"case_id": i["case_id"]} for i in snapshot.raw["cases"]],
            self.names.audit_events: [
                {"stream": i["stream"], "seq": i["seq"]}
                for i in snapshot.raw["audit_events"]
                if i["stream"]["S"].startswith("CASE#")
            ],
        }
        for table, keys in removals.items():
            with batch_writer(self.oracle, table) as writer:
                for key in keys:
                    writer.delete_item(Key=key)

    def ledger_check(self) -> list[Problem]:
        """The ledger against every pledge the run recorded (once, at the end)."""
        snapshot = Snapshot.scan(self.oracle, self.names, roles=("pledges", "ledger"))
        snapshot.raw["audit_events"] = Snapshot.scan(
            self.oracle, self.names, roles=("audit_events",)
        ).raw["audit_events"]
        return ledger_problems(snapshot)


def _no_broker(*_args, **_kwargs) -> None:
    return None


def _bind(spec: ActorSpec, world: World) -> Callable[[], object]:
    return lambda: spec.work(world, spec.name)


TOLERATED = (BotoCoreError, ClientError, RetriesExhausted, CaseError, faults.SimulatedCrash)


def _tolerated(error: BaseException) -> bool:
    from reconciliation.claims.repository import ClaimTaken

    return isinstance(error, (*TOLERATED, ClaimTaken))


def _outcome(hand: Hand) -> str:
    if hand.error is not None:
        return f"{type(hand.error).__name__}"
    return str(hand.result)[:80]


# --- the exploration -----------------------------------------------------------------------


@dataclass(frozen=True)
class HandsConfig:
    bound: int = BOUND
    per_pair: int = 0  # schedules per pair (0: every one within the bound)
    max_schedules: int = 0  # over the whole run (0: no cap)
    pairs: tuple[str, ...] = ()  # "a×b" or "a,b" names; empty: every pair
    sample: int = 0  # pairs drawn by ``seed`` (0: all)
    faults: bool = True  # depth-1 faults at every write of the serial schedules
    first_violation: bool = False  # end each pair at its first violation (mutation tests)
    seed: int = 0
    endpoint_url: str | None = None


@dataclass
class HandsExploration:
    config: HandsConfig
    results: list[ScheduleResult]
    seconds: float
    pairs: int
    extra: list[Problem] = field(default_factory=list)

    @property
    def violations(self) -> list[ScheduleResult]:
        return [r for r in self.results if r.problems]

    def by_preemptions(self) -> dict[int, int]:
        """Interleavings (faulted schedules apart) per pre-emption count, 0 to the bound."""
        counts = Counter(r.preemptions for r in self.results if not r.fault)
        return {k: counts.get(k, 0) for k in range(max([self.config.bound, *counts]) + 1)}

    def distribution(self) -> str:
        faulted = sum(1 for r in self.results if r.fault)
        levels = ", ".join(f"{k}: {n}" for k, n in self.by_preemptions().items())
        return f"{levels}; with a fault (serial): {faulted}"

    def summary(self) -> str:
        count = len(self.violations) + bool(self.extra)
        return f"explore_faults: {len(self.results)} schedules, {count} violations"

    def lines(self) -> list[str]:
        out = []
        for result in self.violations:
            shown = "; ".join(str(p) for p in result.problems[:3])
            out.append(f"✗ {result.label()}: {shown}")
        out.extend(f"✗ at the end: {p}" for p in self.extra)
        deepest = max((r.preemptions for r in self.results), default=0)
        faulted = sum(1 for r in self.results if r.fault)
        out.append(f"by pre-emptions: {self.distribution()}")
        out.append(
            f"actors 2: {self.pairs} pairs, bound {self.config.bound} pre-emptions "
            f"(deepest run {deepest}), {faulted} with a fault, {self.seconds:.0f} s"
        )
        out.append(self.summary())
        return out


def _chosen_pairs(config: HandsConfig) -> list[tuple[ActorSpec, ActorSpec]]:
    every = pairs(catalogue())
    if config.pairs:
        wanted = {tuple(sorted(p.replace("×", ",").split(","))) for p in config.pairs}
        every = [p for p in every if tuple(sorted((p[0].name, p[1].name))) in wanted]
    if config.sample and config.sample < len(every):
        every = sorted(random.Random(config.seed).sample(every, config.sample), key=every.index)
    return every


def explore_pair(
    session: HandsSession, pair: tuple[ActorSpec, ActorSpec], config: HandsConfig, budget: int
) -> list[ScheduleResult]:
    """The schedules of ``pair`` within the bound: every one, fewest pre-emptions first,
    then one fault at each write of its serial schedules (``budget`` 0); or, capped at
    ``budget``, a seeded share of each pre-emption count (:func:`_explore_capped`)."""
    if budget:
        return _explore_capped(session, pair, config, budget)
    results: list[ScheduleResult] = []
    frontier = Frontier()
    frontier.push(0, ())
    # Both orders of the first choice start a round of their own.
    frontier.push(0, (pair[1].name,))
    serial: list[ScheduleResult] = []
    seen: set[tuple[str, ...]] = set()
    while frontier:
        _cost, prefix = frontier.pop()
        result = session.run(pair, prefix)
        chosen = tuple(d.chosen for d in result.decisions)
        if chosen in seen:
            continue
        seen.add(chosen)
        results.append(result)
        if config.first_violation and result.problems:
            return results
        if result.preemptions == 0:
            serial.append(result)
        for cost, child in children(result.decisions, len(prefix), config.bound):
            frontier.push(cost, child)
    if config.faults:
        for base in serial:
            writes = dict.fromkeys(c.point for c in base.calls if c.write and c.hand)
            for point, kind in itertools.product(writes, HAND_FAULTS):
                results.append(session.run(pair, _choices(base), (point, kind)))
    return results


def _choices(result: ScheduleResult) -> tuple[str, ...]:
    return tuple(d.chosen for d in result.decisions)


def _explore_capped(
    session: HandsSession, pair: tuple[ActorSpec, ActorSpec], config: HandsConfig, budget: int
) -> list[ScheduleResult]:
    """``budget`` schedules of ``pair``, level by level of the bound: both serial
    schedules, then a seeded share of the schedules with one pre-emption (children of the
    serial ones), then of those with two (children of the ones run with one), and so on
    to the bound; a third of the budget (with faults) goes to a seeded sample of the
    faults at the serial schedules' writes. Deterministic given ``config.seed``; a level
    with fewer schedules than its share leaves the rest to the next."""
    rng = random.Random(f"{config.seed}:{pair[0].name}×{pair[1].name}")
    fault_share = budget // 3 if config.faults else 0
    quotas = level_quotas(budget - fault_share, config.bound)
    results: list[ScheduleResult] = []
    seen: set[tuple[str, ...]] = set()
    level: list[tuple[ScheduleResult, int]] = []  # (result, prefix length) of a level
    carry = 0
    for depth, quota in enumerate(quotas):
        if depth == 0:
            candidates = [Child(0, ()), Child(0, (pair[1].name,))]
        else:
            candidates = sample_level(
                [
                    child
                    for result, length in level
                    for child in marked_children(result.decisions, length, config.bound)
                    if child.cost == depth
                ],
                rng,
            )
        wanted, level = quota + carry, []
        for child in candidates:
            if len(level) >= wanted:
                break
            result = session.run(pair, child.prefix)
            chosen = _choices(result)
            if chosen in seen:
                continue
            seen.add(chosen)
            results.append(result)
            level.append((result, len(child.prefix)))
            if config.first_violation and result.problems:
                return results
        carry = wanted - len(level)
    if fault_share:
        serial = [r for r in results if r.preemptions == 0]
        planned = [
            (base, point, kind)
            for base in serial
            for point in dict.fromkeys(c.point for c in base.calls if c.write and c.hand)
            for kind in HAND_FAULTS
        ]
        rng.shuffle(planned)
        for base, point, kind in planned[: fault_share + carry]:
            results.append(session.run(pair, _choices(base), (point, kind)))
            if config.first_violation and results[-1].problems:
                return results
    return results


def explore_hands(config: HandsConfig, progress=None) -> HandsExploration:
    started = time.monotonic()
    chosen = _chosen_pairs(config)
    endpoint = config.endpoint_url or settings.DYNAMODB_ENDPOINT_URL
    results: list[ScheduleResult] = []
    extra: list[Problem] = []
    with explorer_engine(endpoint) as url:
        prefix = f"xh{uuid.uuid4().hex[:8]}-"
        with HandsSession(endpoint_url=url, prefix=prefix, seed=config.seed) as session:
            for pair in chosen:
                left = config.max_schedules - len(results) if config.max_schedules else 0
                if config.max_schedules and left <= 0:
                    break
                budget = (
                    min(b for b in (config.per_pair, left) if b) if (config.per_pair or left) else 0
                )
                found = explore_pair(session, pair, config, budget)
                results += found
                if progress is not None:
                    progress(pair, found)
            extra = session.ledger_check()
    return HandsExploration(config, results, time.monotonic() - started, len(chosen), extra)
