"""``explore_faults --actors 2``: two hands of the catalogue (:mod:`.catalogue`) on one
intent and its case, interleaved at every DynamoDB call point (and every acknowledgement
sent) under a pre-emption bound (:mod:`.schedule`, through the wire's
:class:`~.wire.HandsWire`), with depth-1 faults at every write of the serial schedules
(the receiver's faults at a send, and the dispatcher's reads too), and the invariants of
:mod:`reconciliation.simulation.hands_invariants` and
:mod:`reconciliation.simulation.ack_invariants` checked at rest. Which pairs, schedules
and faults run is :mod:`.hands_search`.

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.test.utils import override_settings

from reconciliation.acks.repository import AckRepository, ack_state_from_item
from reconciliation.audit.regions import pledge_item_stream
from reconciliation.cases.changes import CaseError
from reconciliation.cases.models import decoded_row
from reconciliation.cases.vocabulary import Override
from reconciliation.casework.sweeps import recheck_open_cases
from reconciliation.casework.tasks import retry_commit_task
from reconciliation.claims.models import (
    OPERATION_CREATE_PLEDGE,
    ClaimStatus,
    claim_pk,
    pending_shard,
)
from reconciliation.claims.repository import ClaimTaken
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
from reconciliation.simulation import faults
from reconciliation.simulation.ack_invariants import ack_problems
from reconciliation.simulation.explorer.catalogue import (
    ENDPOINT,
    ActorSpec,
    World,
    dispatch_pass,
    prelude,
)
from reconciliation.simulation.explorer.receiver import Receiver
from reconciliation.simulation.explorer.schedule import (
    Decision,
    Hand,
    ScheduleStuck,
    Turns,
    preemptions,
    run_schedule,
)
from reconciliation.simulation.explorer.session import quiet_logs, simulated_waits
from reconciliation.simulation.explorer.vocabulary import MAY_HAVE_APPLIED, OWN_SHARD, TENANT
from reconciliation.simulation.explorer.wire import HandCall, HandsWire
from reconciliation.simulation.hands_invariants import (
    answered_problems,
    decision_problems,
    last_answer_problems,
    late_case_problems,
    region_problems,
    resolution_evidence_problems,
    resolution_problems,
)
from reconciliation.simulation.invariants import (
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

# The dispatcher at rest: passes, and the wait before each (past every retry delay of
# the first attempts).
DRAIN_PASSES = 4
DRAIN_WAIT_S = 3600


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
        late = _late_case_opens(calls)
        rechecked = self._settle(world)
        snapshot = self._items(world, calls)
        cases = [decoded_row(i) for i in snapshot.raw["cases"]]
        pledges = snapshot.plain("pledges")
        streams = snapshot.streams()
        pledge_exists = any(p["intent_id"] == world.intent_id for p in pledges)
        return [
            *rechecked,
            *resolution_problems(streams),
            *decision_problems(streams),
            *late_case_problems(late),
            *answered_problems(cases, pledges),
            *region_problems(self._recorded_by_region(world)),
            *last_answer_problems(world.answers, pledge_exists),
            *resolution_evidence_problems(cases, pledges),
            *_lost_at_rest(world, snapshot, cases),
            *case_type_problems(c.case_open for c in calls if c.case_open),
            *audit_problems(snapshot),
            *fence_problems((c.point, t) for c in calls for t in c.unfenced),
            *ack_problems(
                [ack_state_from_item(item) for item in snapshot.raw["pledges"]],
                world.receiver.receipts,
                endpoint=ENDPOINT,
                cases=snapshot.cases(),
            ),
        ]

    def _settle(self, world: World) -> list[Problem]:
        """The open-case re-check, then the dispatcher drained: what either reports.
        Invariant c is judged after this re-check, in every schedule: one that fails or
        leaves an error is reported, never taken as a re-check that ran."""
        self.wire.start(None)
        rechecked: list[Problem] = []
        try:
            report = recheck_open_cases(world.store)
            rechecked += [
                Problem("explorer", f"re-check at rest: {e}"[:300]) for e in report.errors
            ]
        except (BotoCoreError, ClientError, CaseError) as exc:
            rechecked.append(Problem("explorer", f"re-check at rest failed: {exc!r}"[:300]))
        return rechecked + self._drain(world)

    def _drain(self, world: World) -> list[Problem]:
        """The dispatcher at rest, fault-free, until the world's pledge is settled: past
        any lease a hand left and the backoff of any failed attempt, a few passes (a void
        that landed during a pass makes the next one send pledge.voided)."""
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
    return isinstance(error, (*TOLERATED, ClaimTaken))


def _outcome(hand: Hand) -> str:
    if hand.error is not None:
        return f"{type(hand.error).__name__}"
    return str(hand.result)[:80]


# --- the exploration -----------------------------------------------------------------------


def _late_case_opens(calls: list[HandCall]) -> list[tuple[str, str]]:
    """The cases opened by a hand whose own commit came after the pledge was recorded: it
    met the pledge, and must answer from it (a replay), not open a case, whoever resolved
    that case later. Narrowed to the hand's commit, not its case write: a late worker
    whose commit was cancelled before the client's retry recorded the pledge, and whose
    case write came after (it read the claim still PENDING in between; two pre-emptions),
    opens a CANCELLED_TRANSACTION case about a recorded intent; the re-check at rest
    resolves it, and the strict check after it holds (docs/reliability.md, "A race left
    as designed")."""
    opens = [c for c in calls if c.case_open and c.status == 200]
    recorded_at = next((c.index for c in calls if c.label == "commit" and c.status == 200), None)
    return [
        c.case_open
        for c in opens
        if c.case_open is not None
        and recorded_at is not None
        and any(
            m.hand == c.hand and m.label == "commit" and recorded_at < m.index < c.index
            for m in calls
        )
    ]


def _lost_at_rest(world: World, snapshot: Snapshot, cases: list[dict[str, Any]]) -> list[Problem]:
    """The intent's lost-pledge problems, but for a claim the system released (the client
    may send it again), a claim still in flight, and a client's own last word (judged by
    invariant e)."""
    released = any(
        c.get("resolution") is not None and c["resolution"].disposition == Override.RELEASE_CLAIM
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
    answered = any(a.kind for a in world.answers)
    return [
        p
        for p in lost_problems(snapshot, world.intent_id, [])
        if not ((released or in_flight) and p.detail.startswith("not recorded"))
        and not (answered and p.detail.startswith("not recorded"))
    ]
