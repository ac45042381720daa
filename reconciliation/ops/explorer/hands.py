"""``explore_faults --actors 2``: two hands of the catalogue (:mod:`.catalogue`) on one
intent and its case, interleaved at every DynamoDB call point (and every acknowledgement
sent) under a pre-emption bound (:mod:`.schedule`, through the wire's
:class:`~.wire.HandsWire`), with depth-1 faults at every write of the serial schedules
(the receiver's faults at a send, and the dispatcher's reads too), and the invariants of
:mod:`reconciliation.ops.hands_invariants` and :mod:`reconciliation.ops.ack_invariants`
checked at rest.

Every schedule runs on a fresh intent (its own key) in the same tables. Its prelude puts
the world where its two hands find it; then the hands run, one at a time, as the schedule
says; then, at rest, a last re-check runs, the dispatcher drains what is due (fault-free,
past any lease and backoff), and the invariants are checked on the intent's own items.
The intent's claim and cases are removed afterwards so no later sweep or queue walk meets
them; its pledge stays, and the ledger is checked against all pledges once, at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from unittest import mock

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.test.utils import override_settings

from reconciliation.cases.changes import CaseError
from reconciliation.cases.vocabulary import Override
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, ClaimStatus, claim_pk
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
from reconciliation.dynamo.tables import ack_shard, drop_tables, ensure_tables
from reconciliation.ops.ack_invariants import delivery_problems, processed_problems
from reconciliation.ops.ack_invariants import unrecorded_problems as unrecorded_ack_problems
from reconciliation.ops.explorer.catalogue import (
    ENDPOINT,
    ActorSpec,
    World,
    catalogue,
    dispatch_pass,
    pairs,
    prelude,
)
from reconciliation.ops.explorer.receiver import RECEIVER_FAULTS, SEND, Receiver
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
from reconciliation.ops.explorer.session import explorer_engine, quiet_logs, simulated_waits
from reconciliation.ops.explorer.vocabulary import MAY_HAVE_APPLIED, OWN_SHARD, TENANT
from reconciliation.ops.explorer.wire import HandCall, HandsWire
from reconciliation.ops.hands_invariants import (
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
from reconciliation.stores import home_store, region_store

# The fault kinds tried at every write of the serial schedules: a write applied whose
# answer is lost, throttling past the budget, a transaction cancelled by a conflict, and
# the process dying right after the call.
HAND_FAULTS = ("timeout_after", "throttle_exhausted", "conflict", "crash_after")
# At the reads of a hand that faults them (the dispatcher's due query and pledge read).
READ_FAULTS = ("throttle_exhausted",)
# The dispatcher at rest: passes, and the wait before each (past every retry delay of
# the first attempts).
DRAIN_PASSES = 4
DRAIN_WAIT_S = 3600


def faults_at(call: HandCall, faulted_reads: frozenset[str]) -> tuple[str, ...]:
    """The fault kinds tried at one call of a serial schedule: the receiver's at a send,
    the write kinds at a write, the read kinds at a read of a hand that faults them."""
    if not call.hand or call.label.endswith(" other"):
        return ()  # the prelude, the checks, or a shard that holds none of its pledges
    if call.label == SEND:
        return RECEIVER_FAULTS
    if call.write:
        return HAND_FAULTS
    return READ_FAULTS if call.hand in faulted_reads else ()


def _fault_plan(base: ScheduleResult, pair: tuple[ActorSpec, ActorSpec]) -> list[tuple[str, str]]:
    faulted_reads = frozenset(spec.name for spec in pair if spec.faulted_reads)
    points = dict.fromkeys((c.point, faults_at(c, faulted_reads)) for c in base.calls)
    return [(point, kind) for point, kinds in points for kind in kinds]


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
                # The tenant's endpoint is on loopback (never connected to: receiver.py).
                WEBHOOK_ALLOW_LOOPBACK=True,
                # The re-check at rest must resolve what the evidence answers (invariant c).
                AUTO_RESOLVE_COMMITTED=True,
            )
        )
        stack.callback(reset_clients)
        stack.enter_context(quiet_logs())
        stack.enter_context(simulated_waits())
        # The retry task is one of the hands; queueing it sends nothing to a broker.
        stack.enter_context(mock.patch.object(retry_commit_task, "apply_async", _no_broker))
        faults.set_plan(None)
        reset_clients()
        self.oracle = build_client(regions()[0])
        ensure_tables(self.oracle, self.names)
        stack.callback(drop_tables, self.oracle, self.names)
        self.wire = HandsWire(self.names, self.turns)
        dynamodb_client().meta.events.register_first("before-send.dynamodb", self.wire)

    def __exit__(self, *exc_info: object) -> None:
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
            world.receiver = Receiver(self.wire.external)
            self.wire.start(None)
            try:
                prelude(world, pair[0].needs | pair[1].needs, self.wire)
            except (Exception, faults.SimulatedCrash) as exc:
                result.problems.append(Problem("explorer", f"prelude failed: {exc!r}"[:300]))
                self._forget(world)
                return result
            self.wire.start(fault, ack_shard=ack_shard(world.intent_id))
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
        rechecked += self._drain(world)
        snapshot = self._items(world, calls)
        from reconciliation.cases.models import decoded_row

        cases = [decoded_row(i) for i in snapshot.raw["cases"]]
        pledges = snapshot.plain("pledges")
        cases_plain = snapshot.cases()
        streams = snapshot.streams()
        pledge_exists = any(p["intent_id"] == world.intent_id for p in pledges)
        released = any(
            c.get("resolution") is not None
            and c["resolution"].disposition == Override.RELEASE_CLAIM
            for c in cases
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
            *delivery_problems(pledges, [ENDPOINT], cases_plain, drained=True),
            *unrecorded_ack_problems(pledges, world.receiver.receipts),
            *processed_problems(world.receiver.receipts, pledges),
        ]

    def _drain(self, world: World) -> list[Problem]:
        """The dispatcher at rest, fault-free, until the world's pledge is settled: past
        any lease a hand left and the backoff of any failed attempt, a few passes (a void
        that landed during a pass makes the next one send pledge.voided)."""
        from reconciliation.acks.repository import AckRepository

        problems: list[Problem] = []
        for _ in range(DRAIN_PASSES):
            state = AckRepository(world.store).get(world.intent_id)
            if state is None or not state.due:
                return problems
            world.advance(settings.ACK_LEASE_S + DRAIN_WAIT_S)
            try:
                report = dispatch_pass(world)
                problems += [Problem("explorer", f"drain at rest: {e}") for e in report.errors]
            except (BotoCoreError, ClientError) as exc:
                problems.append(Problem("explorer", f"drain at rest failed: {exc!r}"[:300]))
        return problems

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


def _no_broker(*_args: object, **_kwargs: object) -> None:
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
    # Schedules per pair of an acknowledgement hand (None: ``per_pair``).
    per_pair_acks: int | None = None
    max_schedules: int = 0  # over the whole run (0: no cap)
    pairs: tuple[str, ...] = ()  # "a×b" or "a,b" names; empty: every pair
    hands: tuple[str, ...] = ()  # only the pairs with one of these hands; empty: every pair
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
    if config.hands:
        every = [p for p in every if {p[0].name, p[1].name} & set(config.hands)]
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
            for point, kind in _fault_plan(base, pair):
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
        planned = [(base, *fault) for base in serial for fault in _fault_plan(base, pair)]
        rng.shuffle(planned)
        for base, point, kind in planned[: fault_share + carry]:
            results.append(session.run(pair, _choices(base), (point, kind)))
            if config.first_violation and results[-1].problems:
                return results
    return results


def explore_hands(
    config: HandsConfig,
    progress: Callable[[tuple[ActorSpec, ActorSpec], list[ScheduleResult]], object] | None = None,
) -> HandsExploration:
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
                per_pair = config.per_pair
                if config.per_pair_acks is not None and (pair[0].acks or pair[1].acks):
                    per_pair = config.per_pair_acks
                budget = min(b for b in (per_pair, left) if b) if (per_pair or left) else 0
                found = explore_pair(session, pair, config, budget)
                results += found
                if progress is not None:
                    progress(pair, found)
            extra = session.ledger_check()
    return HandsExploration(config, results, time.monotonic() - started, len(chosen), extra)
