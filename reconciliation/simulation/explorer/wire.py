"""Every DynamoDB call as it leaves botocore: its name in the life (a point), its shape,
the fence it must carry, and the ``before-send`` hooks that fail the calls a plan names,
answering as DynamoDB would: :class:`Wire` for one intent's life, :class:`HandsWire` for
two hands on one case (``--actors 2``), which also hands the turn to the scheduler.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from reconciliation.acks.roster import ROSTER_PREFIX
from reconciliation.cases.counters import COUNTER_PREFIX
from reconciliation.dynamo.client import TableNames
from reconciliation.simulation import faults
from reconciliation.simulation.explorer.vocabulary import (
    DDB,
    ERRORS,
    KINDS,
    OWN_SHARD,
    WRITE_OPERATIONS,
    Fault,
    FaultKind,
    Point,
)
from reconciliation.simulation.invariants import KEY_ATTRIBUTES

if TYPE_CHECKING:
    from reconciliation.simulation.explorer.schedule import Turns

# --- naming the calls --------------------------------------------------------------------


@dataclass(frozen=True)
class CallShape:
    """What a request is, read from its body: its label, and for a transaction its items."""

    label: str
    write: bool
    identity: str = ""  # reads: two reads with one identity are one point
    items: tuple[str, ...] = ()  # transaction items as "table|key"
    hot: int = 0  # the item a conflict lands on
    case_open: tuple[str, str] | None = None  # (case_id, case_type) of a case opening
    case_claim_version: int | None = None  # the claim version that case is about


ACKS_DUE = "acks_due"  # the pledges' sparse index of acknowledgements due
# An acknowledgement shard by name (reconciliation/dynamo/tables.py · ack_shard), or its
# lease item (#ACKLEASE#<region>#A#n, reconciliation/acks/shard_lease.py).
_ACK_SHARD = re.compile(r"(?:#ACKLEASE#[^#]+#)?(A#\d+)")

READ_LABELS = {
    "idempotency_keys": "claim read",
    "pledges": "pledge read",
    "cases": "case read",
    "ledger": "ledger read",
    "audit_events": "audit read",
}


def table_roles(names: TableNames) -> dict[str, str]:
    return {getattr(names, role): role for role in KEY_ATTRIBUTES}


def call_shape(
    operation: str, body: dict[str, Any], roles: dict[str, str], own_shard: str
) -> CallShape:
    if operation == "TransactWriteItems":
        return _transaction_shape(body, roles)
    table = body.get("TableName", "")
    label = _label(operation, roles.get(table, table), body, roles, own_shard)
    if operation in WRITE_OPERATIONS:
        return CallShape(label, True)
    return CallShape(label, False, identity=_read_identity(label, body))


def _label(
    operation: str, role: str, body: dict[str, Any], roles: dict[str, str], own_shard: str
) -> str:
    if operation == "PutItem":
        return "claim put" if role == "idempotency_keys" else f"put {role}"
    if operation == "UpdateItem":
        return _update_label(role, body.get("UpdateExpression", ""))
    if operation == "GetItem":
        return READ_LABELS.get(role, f"read {role}")
    if operation == "Query":
        return _query_label(role, body, own_shard)
    if operation in ("BatchGetItem", "BatchWriteItem"):
        verb = "get" if operation == "BatchGetItem" else "write"
        return f"batch {verb} " + " ".join(sorted(roles.get(t, t) for t in body["RequestItems"]))
    return f"{operation} {role}"


def _update_label(role: str, expression: str) -> str:
    if role != "idempotency_keys":
        return f"update {role}"
    if "#st = :pending" in expression:
        return "re-claim"
    if "#st = :st" in expression:
        return "finalise"
    if "case_id" in expression and "REMOVE pending_shard" in expression:
        return "attach"
    return "claim update"


def _query_label(role: str, body: dict[str, Any], own_shard: str) -> str:
    index = body.get("IndexName", "")
    values = body.get("ExpressionAttributeValues", {})
    if index == "pending_by_expiry":
        shard = values.get(":s", {}).get("S")
        return "pending query own" if shard == own_shard else "pending query other"
    if index == ACKS_DUE:
        return "due query"
    if index == "open_by_queue":
        verb = "queue count" if body.get("Select") == "COUNT" else "queue walk"
        return f"{verb} {values.get(':q', {}).get('S', '?')}"
    return f"query {role} {index}".rstrip()


def other_ack_shard(body: dict[str, Any], own: str) -> bool:
    """Whether the request names an acknowledgement shard other than ``own`` (in its key,
    item or values): a shard that holds no pledge of the schedule, whatever the call
    (the due query of each shard, or a lease taken on the shard itself)."""
    if not own:
        return False
    parts = [body.get("Key", {}), body.get("Item", {}), body.get("ExpressionAttributeValues", {})]
    named = {
        value["S"]
        for part in parts
        for value in part.values()
        if isinstance(value, dict) and isinstance(value.get("S"), str)
    }
    shards = {m.group(1) for m in map(_ACK_SHARD.fullmatch, named) if m}
    return any(shard != own for shard in shards)


def _read_identity(label: str, body: dict[str, Any]) -> str:
    """Identical reads are one point: same request, ignoring numbers (times) in values.
    The other fifteen pending shards are one point too."""
    if label == "pending query other":
        return label
    values = {k: v for k, v in body.get("ExpressionAttributeValues", {}).items() if "N" not in v}
    rest = {k: v for k, v in body.items() if k != "ExpressionAttributeValues"}
    return json.dumps([rest, values], sort_keys=True)


def _transaction_shape(body: dict[str, Any], roles: dict[str, str]) -> CallShape:
    parts = [
        (verb, spec, roles.get(spec.get("TableName", ""), "?"))
        for item in body.get("TransactItems", [])
        for verb, spec in item.items()
    ]
    items = tuple(_item_identity(spec, role) for _, spec, role in parts)
    if any(verb == "Put" and role == "pledges" for verb, _, role in parts):
        ledger = [i for i, (v, _, r) in enumerate(parts) if v == "Update" and r == "ledger"]
        return CallShape("commit", True, items=items, hot=(ledger or [0])[0])
    counters = [i for i, part in enumerate(parts) if _is_counter(*part)]
    hot = (counters or [0])[0]
    for verb, spec, role in parts:
        if (
            verb == "Put"
            and role == "cases"
            and "attribute_not_exists" in spec.get("ConditionExpression", "")
        ):
            case = spec["Item"]
            opened = (case["case_id"]["S"], case.get("case_type", {}).get("S", "?"))
            version = int(case.get("claim_version", {}).get("N", "0"))
            return CallShape(
                "case open",
                True,
                items=items,
                hot=hot,
                case_open=opened,
                case_claim_version=version,
            )
    if any(role == "cases" for _, _, role in parts):
        return CallShape("case change", True, items=items, hot=hot)
    return CallShape("transaction", True, items=items)


def _is_counter(verb: str, spec: dict[str, Any], role: str) -> bool:
    case_id = spec.get("Key", {}).get("case_id", {}).get("S", "")
    return role == "cases" and verb == "Update" and case_id.startswith(COUNTER_PREFIX)


def _is_roster_beat(verb: str, spec: dict[str, Any], role: str) -> bool:
    """A dispatcher's heartbeat in the roster (reconciliation/acks/roster.py): it writes
    its own map entry, decided on no read, so there is nothing to condition it on."""
    case_id = spec.get("Key", {}).get("case_id", {}).get("S", "")
    return role == "cases" and verb == "Update" and case_id.startswith(ROSTER_PREFIX)


# The condition each kind of write must carry (docs/design.md §3, §4, §6, §7): a claim moves
# only under the version or attempt its holder read, a pledge, case or event is created
# only where none is. Ledger and queue-counter ADDs commute and need none.
FENCES = {
    ("idempotency_keys", "Put"): ("attribute_not_exists(pk)",),
    ("idempotency_keys", "Update"): ("version", "attempt_id"),
    ("idempotency_keys", "Delete"): ("version", "attempt_id"),
    ("pledges", "Put"): ("attribute_not_exists(intent_id)",),
    # The acknowledgement's record is fenced by the count of its writes (ack_fence).
    ("pledges", "Update"): ("#st", "audit_seq", "version", "ack_fence"),
    ("cases", "Put"): ("attribute_not_exists(case_id)", "version"),
    # A shard's acknowledgement lease (reconciliation/acks/shard_lease.py): taken when
    # free (run out) or still ours (the fence we wrote).
    ("cases", "Update"): ("version", "lease_until <= :now", "lease_fence = :held"),
    ("audit_events", "Put"): ("attribute_not_exists(seq)",),
}
VERBS = {"PutItem": "Put", "UpdateItem": "Update", "DeleteItem": "Delete"}


def unfenced_writes(operation: str, body: dict[str, Any], roles: dict[str, str]) -> tuple[str, ...]:
    """The writes of a request that lack the condition their kind must carry."""
    if operation in VERBS:
        parts = [(VERBS[operation], body)]
    elif operation == "TransactWriteItems":
        parts = [(v, spec) for item in body.get("TransactItems", []) for v, spec in item.items()]
    elif operation == "BatchWriteItem":  # DynamoDB cannot condition a batch write
        tables = [roles.get(t, t) for t in body.get("RequestItems", {})]
        return tuple(f"batch write {t}" for t in tables if any(r == t for r, _ in FENCES))
    else:
        return ()
    out = []
    for verb, spec in parts:
        role = roles.get(spec.get("TableName", ""), "?")
        fence = FENCES.get((role, verb))
        if fence is None or _is_counter(verb, spec, role) or _is_roster_beat(verb, spec, role):
            continue
        if not any(part in spec.get("ConditionExpression", "") for part in fence):
            out.append(f"{verb} on {role} without {' or '.join(fence)}")
    return tuple(out)


def _item_identity(spec: dict[str, Any], role: str) -> str:
    key = spec.get("Key")
    if key is None:  # a Put names its key inside the item
        item = spec.get("Item", {})
        key = {a: item[a] for a in KEY_ATTRIBUTES.get(role, ()) if a in item}
    return f"{spec.get('TableName')}|{json.dumps(key, sort_keys=True)}"


# --- the wire ----------------------------------------------------------------------------


@dataclass
class CallRecord:
    """One DynamoDB call as it left botocore, and what became of it."""

    point: str
    episode: str
    label: str
    operation: str
    write: bool
    digest: str  # of the request body: identical retries share it
    case_open: tuple[str, str] | None = None
    case_claim_version: int | None = None
    unfenced: tuple[str, ...] = ()  # writes without the condition their kind must carry
    fault: str | None = None  # a planned kind, or "throttled"/"conflicted" (lasting faults)
    sent: bool = False
    status: int | None = None  # the engine's own answer, when it was sent


def _parsed(request: AWSPreparedRequest, event_name: str) -> tuple[str, bytes, dict[str, Any]]:
    """The DynamoDB operation a ``before-send`` event names, the request's raw body and
    its JSON."""
    raw = request.body or b"{}"
    raw = raw.encode() if isinstance(raw, str) else raw
    return event_name.rsplit(".", 1)[-1], raw, json.loads(raw)


def _answer(
    request: AWSPreparedRequest, status: int, error_type: str, message: str, **extra: Any
) -> AWSResponse:
    return faults.error_response(request, status, error_type, f"{message} (injected)", **extra)


def _cancelled(request: AWSPreparedRequest, items: tuple[str, ...], hot: set[str]) -> AWSResponse:
    reasons = [
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
        if item in hot
        else {"Code": "None"}
        for item in items
    ]
    return _answer(
        request,
        400,
        DDB + "TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons",
        CancellationReasons=reasons,
    )


class Wire:
    """The ``before-send`` hook of the system's client, registered first.

    It names every call, applies the scenario's plan, and sends every call it does not
    fail itself, so it knows the engine's real answer to each: a commit that applied while
    its caller heard a timeout still counts as applied."""

    # The current episode and what it has done so far (reset by :meth:`begin`).
    episode: str
    _writes: Counter[str]
    _reads: dict[str, dict[str, int]]
    _exhausted: set[str]
    _hot: set[str]

    def __init__(self, names: TableNames):
        self.roles = table_roles(names)
        # TCP_NODELAY as botocore sets it: without it every call waits out a delayed ACK.
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self.session = URLLib3Session(timeout=10, max_pool_connections=4, socket_options=nodelay)
        self.start(())

    def start(self, plan: Iterable[Fault], *, own_shard: str = OWN_SHARD) -> None:
        self.plan = {str(f.point): f.kind for f in plan}
        self.fired: set[str] = set()
        self.calls: list[CallRecord] = []
        self.own_shard = own_shard
        self.begin("setup")

    on_stall: Callable[[str], None] | None = None

    def _stall(self, point: str) -> None:
        """Run what happens while the caller of ``point`` is paused, then give the caller
        back its episode as it was."""
        saved = (self.episode, self._writes, self._reads, self._exhausted, self._hot)
        try:
            if self.on_stall:
                self.on_stall(point)
        finally:
            self.episode, self._writes, self._reads, self._exhausted, self._hot = saved

    def begin(self, episode: str) -> None:
        """A new request or task run: call counts restart and lasting faults end."""
        self.episode = episode
        self._writes = Counter()
        self._reads = {}
        self._exhausted = set()
        self._hot = set()

    def __call__(
        self, request: AWSPreparedRequest, event_name: str = "", **_kwargs: Any
    ) -> AWSResponse | None:
        operation, raw, body = _parsed(request, event_name)
        shape = call_shape(operation, body, self.roles, self.own_shard)
        record = self._record(operation, shape, hashlib.sha256(raw).hexdigest()[:16])
        record.unfenced = unfenced_writes(operation, body, self.roles)
        kind = self.plan.get(record.point)
        if kind and record.point not in self.fired:
            self.fired.add(record.point)
            record.fault = kind
            return self._inject(KINDS[kind], request, record, shape)
        if record.digest in self._exhausted:
            record.fault = "throttled"
            return _answer(request, *ERRORS["throttle"])
        if self._hot.intersection(shape.items):
            record.fault = "conflicted"
            return _cancelled(request, shape.items, self._hot)
        return self._send(request, record)

    def _record(self, operation: str, shape: CallShape, digest: str) -> CallRecord:
        if shape.write:
            self._writes[shape.label] += 1
            occurrence = self._writes[shape.label]
        else:
            seen = self._reads.setdefault(shape.label, {})
            occurrence = seen.setdefault(shape.identity, len(seen) + 1)
        point = Point(self.episode, shape.label, occurrence)
        record = CallRecord(
            str(point), self.episode, shape.label, operation, shape.write, digest, shape.case_open
        )
        record.case_claim_version = shape.case_claim_version
        self.calls.append(record)
        return record

    def _inject(
        self, kind: FaultKind, request: AWSPreparedRequest, record: CallRecord, shape: CallShape
    ) -> AWSResponse:
        response = self._send(request, record) if kind.sends else None
        if kind.outcome == "stall" and response is not None:
            self._stall(record.point)
            return response
        if kind.exhausts:
            self._exhausted.add(record.digest)
        if kind.outcome == "timeout":
            raise ReadTimeoutError(endpoint_url=request.url)
        if kind.outcome == "crash":
            raise faults.SimulatedCrash(f"explore_faults: died after {record.point}")
        if kind.outcome == "conflict" and shape.items:
            # The hot item stays hot for the rest of the episode, as a hot key does.
            self._hot.add(shape.items[shape.hot])
            return _cancelled(request, shape.items, self._hot)
        return _answer(request, *ERRORS[kind.outcome])

    def _send(self, request: AWSPreparedRequest, record: CallRecord) -> AWSResponse:
        response: AWSResponse = self.session.send(request)
        record.sent, record.status = True, response.status_code
        return response


# --- the wire of two hands (``--actors 2``) --------------------------------------------------


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
    """The ``before-send`` hook of ``--actors 2``: names each call by its hand, yields the
    turn to the scheduler before it, applies the schedule's one fault, and sends the rest."""

    def __init__(self, names: TableNames, turns: Turns):
        self.roles = table_roles(names)
        self.turns = turns
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        self.session = URLLib3Session(timeout=10, max_pool_connections=4, socket_options=nodelay)
        self.start(None)

    def start(self, fault: tuple[str, str] | None, *, ack_shard: str = "") -> None:
        self.fault = fault  # (point, kind)
        self.ack_shard = ack_shard  # the schedule's pledge's acknowledgement shard
        self.fired = False
        self.calls: list[HandCall] = []
        self._counts: dict[tuple[str, str], int] = {}
        self._exhausted: set[tuple[str, str]] = set()

    def __call__(
        self, request: AWSPreparedRequest, event_name: str = "", **_kwargs: Any
    ) -> AWSResponse | None:
        operation, raw, body = _parsed(request, event_name)
        shape = call_shape(operation, body, self.roles, OWN_SHARD)
        elsewhere = other_ack_shard(body, self.ack_shard)
        if elsewhere:
            shape = replace(shape, label=f"{shape.label} other")
        hand = self.turns.current_hand()
        name = hand.name if hand else ""
        count = self._counts[(name, shape.label)] = self._counts.get((name, shape.label), 0) + 1
        point = f"{name or 'rest'} {shape.label}#{count}"
        if hand is not None and shape.label != "pending query other" and not elsewhere:
            # The other fifteen pending shards never hold a schedule's claim (OWN_SHARD),
            # nor the other acknowledgement shards its pledge: no other hand's write can
            # change what they answer.
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
            return _answer(request, *ERRORS["throttle"])
        return self._send(request, call)

    def external(self, label: str) -> str | None:
        """A call that leaves the system elsewhere than to DynamoDB (an acknowledgement's
        POST, reconciliation/simulation/explorer/receiver.py): a point of the schedule as a write
        is (the turn is handed over before it); the schedule's fault kind if it names it."""
        hand = self.turns.current_hand()
        name = hand.name if hand else ""
        count = self._counts[(name, label)] = self._counts.get((name, label), 0) + 1
        point = f"{name or 'rest'} {label}#{count}"
        if hand is not None:
            self.turns.yield_point(point, write=True)
        call = HandCall(len(self.calls), name, point, label, True)
        self.calls.append(call)
        if self.fault and not self.fired and self.fault[0] == point:
            self.fired = True
            call.fault = self.fault[1]
        return call.fault

    def _inject(
        self,
        request: AWSPreparedRequest,
        call: HandCall,
        shape: CallShape,
        digest: tuple[str, str],
    ) -> AWSResponse:
        kind = KINDS[call.fault or ""]
        response = self._send(request, call) if kind.sends else None
        if kind.exhausts:
            self._exhausted.add(digest)
        if kind.outcome == "timeout":
            raise ReadTimeoutError(endpoint_url=request.url)
        if kind.outcome == "crash":
            raise faults.SimulatedCrash(f"explore_faults: {call.point} died after the call")
        if kind.outcome == "conflict" and shape.items:
            return _cancelled(request, shape.items, {shape.items[shape.hot]})
        if response is not None:
            return response
        return _answer(request, *ERRORS[kind.outcome])

    def _send(self, request: AWSPreparedRequest, call: HandCall) -> AWSResponse:
        response: AWSResponse = self.session.send(request)
        call.status = response.status_code
        return response
