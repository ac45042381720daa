"""Deterministic fault-space explorer: ``manage.py explore_faults`` (DESIGN.md §8).

Random fault injection (``simulate``) samples the failure space; this enumerates it, in the
spirit of FoundationDB's simulation tests. One intent's whole life runs in-process with the
real code against DynamoDB Local: the client's POST through the Django API and the retries
the API contract tells it to make, then, at rest, the stuck-claim sweep, a person's
RETRY_COMMIT on each open case and the retry task. Every DynamoDB call is named where it
leaves botocore (``before-send``, so each SDK retry is a call of its own), and a scenario
is a plan naming which calls fail and how. Time is simulated, sleeps are skipped and
nothing is sampled, so a scenario id alone replays it.

Depth 1 is every fault kind at every call of the fault-free life; depth 2 adds a second
fault at every later call of the first fault's own episode (request or task run), and with
``later_writes`` at every write of its later episodes too. After each life the invariants
of :mod:`reconciliation.ops.invariants` are checked at rest.

The only randomness left is in the system's UUIDs (tokens, attempt ids), which steer
nothing; ``seed`` picks the scenarios' idempotency keys.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import queue
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock
from urllib.parse import quote

import botocore.endpoint
from botocore.awsrequest import AWSResponse
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError
from botocore.httpsession import URLLib3Session
from botocore.retries.quota import RetryQuota
from django.conf import settings
from django.test.utils import override_settings

from reconciliation import clock
from reconciliation.actors import Actor, Role
from reconciliation.dynamo import attempts, faults
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
from reconciliation.ops.invariants import (
    ESCAPED,
    KEY_ATTRIBUTES,
    LOST,
    VIEW_ERRORS,
    Answer,
    Problem,
    Snapshot,
    check_at_rest,
)
from reconciliation.policy import RETRY_COMMIT, allowed_actions
from reconciliation.repositories.cases import COUNTER_PREFIX, RESOLVED
from reconciliation.repositories.claims import (
    COMPLETED,
    OPERATION_CREATE_PLEDGE,
    PENDING,
    ClaimTaken,
    claim_pk,
    pending_shard,
)
from reconciliation.repositories.pledges import intent_id_for
from reconciliation.services.cases import CaseError

# --- vocabulary --------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultKind:
    sends: bool  # the call reaches DynamoDB, and takes effect, before the fault
    exhausts: bool  # every later identical call of the episode is throttled too
    outcome: str  # "timeout", "crash", "conflict" or a key of ERRORS


KINDS = {
    "timeout_before": FaultKind(False, False, "timeout"),
    "timeout_after": FaultKind(True, False, "timeout"),
    "http500_before": FaultKind(False, False, "http500"),
    "http500_after": FaultKind(True, False, "http500"),
    "throttle_once": FaultKind(False, False, "throttle"),
    "throttle_exhausted": FaultKind(False, True, "throttle"),
    "lost_then_throttle": FaultKind(True, True, "timeout"),
    "conflict": FaultKind(False, False, "conflict"),
    "validation": FaultKind(False, False, "validation"),
    "access_denied": FaultKind(False, False, "access_denied"),
    "crash_after": FaultKind(True, False, "crash"),
    # The process pauses right after the call returns, past its lease (a GC pause, a frozen
    # VM): meanwhile the sweep runs and the client, hearing nothing, sends its request
    # again; then the late worker carries on with what it holds.
    "stall_after": FaultKind(True, False, "stall"),
}
FAULT_KINDS = tuple(KINDS)
# After these the caller cannot tell whether the call took effect (DESIGN.md §4).
MAY_HAVE_APPLIED = frozenset(
    name for name, k in KINDS.items() if k.sends or k.outcome in ("timeout", "http500")
)
EXHAUSTING = frozenset(name for name, k in KINDS.items() if k.exhausts)
THROTTLES = frozenset({"throttle_once", *EXHAUSTING})
# Not run on a read: a read has no effect, so the "after" kinds equal the "before" ones
# (lost_then_throttle equals throttle_exhausted), and DynamoDB answers a read during a
# transaction with the committed item, never TransactionConflict.
# A stalled read is only a later start of the next write: stalls are made at writes.
WRITE_ONLY = frozenset(
    {"timeout_after", "http500_after", "lost_then_throttle", "conflict", "stall_after"}
)
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
)
DDB = "com.amazonaws.dynamodb.v20120810#"
ERRORS = {
    "http500": (500, DDB + "InternalServerError", "Internal server error"),
    "throttle": (400, DDB + "ThrottlingException", "Rate of requests exceeds the allowed rate"),
    "conflict": (400, DDB + "TransactionConflictException", "Transaction is ongoing for the item"),
    "validation": (400, "com.amazon.coral.validate#ValidationException", "Invalid request"),
    "access_denied": (400, "com.amazon.coral.service#AccessDeniedException", "Access denied"),
}
COLUMNS = {
    "timeout_before": "t/o<",
    "timeout_after": "t/o>",
    "http500_before": "500<",
    "http500_after": "500>",
    "throttle_once": "thr1",
    "throttle_exhausted": "thr*",
    "lost_then_throttle": "lost",
    "conflict": "confl",
    "validation": "valid",
    "access_denied": "deny",
    "crash_after": "crash",
    "stall_after": "stall",
}

FAULT_FREE = "fault-free"
TENANT = "explorer"
BODY = {"donor_ref": "XF-0001", "fund": "GENERAL", "amount": "25.00", "currency": "USD"}
# Every scenario's key lands in this pending shard, so the sweep's calls come in one order.
OWN_SHARD = "P#7"
MAX_REQUESTS = 6  # the client's budget for one intent
RERUNS = 3  # runs of one sweep or disposition after it was aborted
MAX_TASK_RUNS = 8  # retry task runs at rest (Celery's redeliveries and lease waits)
RESEND = frozenset(
    {(409, "request_in_progress"), (409, "transaction_conflict"), (409, "transaction_cancelled")}
)
STAFF = Actor(username="explorer-staff", role=Role.FINANCE_STAFF, email="explorer@example.org")
REASON = "Explorer: the commit met a transient failure; retry it."
ABORTED, BROKEN = "aborted", "broken"
# A task or a person's action that fails with these is logged and simply run again.
TOLERATED = (BotoCoreError, ClientError, RetriesExhausted, ClaimTaken, CaseError)


@dataclass(frozen=True, order=True)
class Point:
    """A call of the life: the ``occurrence``-th call named ``label`` in ``episode``."""

    episode: str
    label: str
    occurrence: int

    def __str__(self) -> str:
        return f"{self.episode} {self.label}#{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> Point:
        episode, _, rest = text.strip().partition(" ")
        label, sep, occurrence = rest.rpartition("#")
        if not (episode and label and sep and occurrence.isdigit()):
            raise ValueError(f"not a call point: {text!r}")
        return cls(episode, label, int(occurrence))


@dataclass(frozen=True)
class Fault:
    point: Point
    kind: str

    def __str__(self) -> str:
        return f"{self.point}:{self.kind}"

    @classmethod
    def parse(cls, text: str) -> Fault:
        point, _, kind = text.rpartition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind in {text!r}; known: {', '.join(KINDS)}")
        return cls(Point.parse(point), kind)


def scenario_id(plan: Iterable[Fault]) -> str:
    return "+".join(str(f) for f in plan) or FAULT_FREE


def scenario_parse(text: str) -> tuple[Fault, ...]:
    if text.strip() == FAULT_FREE:
        return ()
    return tuple(Fault.parse(part) for part in text.split("+"))


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


READ_LABELS = {
    "idempotency_keys": "claim read",
    "pledges": "pledge read",
    "cases": "case read",
    "ledger": "ledger read",
    "audit_events": "audit read",
}


def table_roles(names: TableNames) -> dict[str, str]:
    return {getattr(names, role): role for role in KEY_ATTRIBUTES}


def call_shape(operation: str, body: dict, roles: dict[str, str], own_shard: str) -> CallShape:
    if operation == "TransactWriteItems":
        return _transaction_shape(body, roles)
    table = body.get("TableName", "")
    label = _label(operation, roles.get(table, table), body, roles, own_shard)
    if operation in WRITE_OPERATIONS:
        return CallShape(label, True)
    return CallShape(label, False, identity=_read_identity(label, body))


def _label(operation: str, role: str, body: dict, roles: dict, own_shard: str) -> str:
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


def _query_label(role: str, body: dict, own_shard: str) -> str:
    index = body.get("IndexName", "")
    values = body.get("ExpressionAttributeValues", {})
    if index == "pending_by_expiry":
        shard = values.get(":s", {}).get("S")
        return "pending query own" if shard == own_shard else "pending query other"
    if index == "open_by_queue":
        verb = "queue count" if body.get("Select") == "COUNT" else "queue walk"
        return f"{verb} {values.get(':q', {}).get('S', '?')}"
    return f"query {role} {index}".rstrip()


def _read_identity(label: str, body: dict) -> str:
    """Identical reads are one point: same request, ignoring numbers (times) in values.
    The other fifteen pending shards are one point too."""
    if label == "pending query other":
        return label
    values = {k: v for k, v in body.get("ExpressionAttributeValues", {}).items() if "N" not in v}
    rest = {k: v for k, v in body.items() if k != "ExpressionAttributeValues"}
    return json.dumps([rest, values], sort_keys=True)


def _transaction_shape(body: dict, roles: dict[str, str]) -> CallShape:
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


def _is_counter(verb: str, spec: dict, role: str) -> bool:
    case_id = spec.get("Key", {}).get("case_id", {}).get("S", "")
    return role == "cases" and verb == "Update" and case_id.startswith(COUNTER_PREFIX)


# The condition each kind of write must carry (DESIGN.md §3, §4, §6, §7): a claim moves
# only under the version or attempt its holder read, a pledge, case or event is created
# only where none is. Ledger and queue-counter ADDs commute and need none.
FENCES = {
    ("idempotency_keys", "Put"): ("attribute_not_exists(pk)",),
    ("idempotency_keys", "Update"): ("version", "attempt_id"),
    ("idempotency_keys", "Delete"): ("version", "attempt_id"),
    ("pledges", "Put"): ("attribute_not_exists(intent_id)",),
    ("pledges", "Update"): ("#st", "audit_seq", "version"),
    ("cases", "Put"): ("attribute_not_exists(case_id)", "version"),
    ("cases", "Update"): ("version",),
    ("audit_events", "Put"): ("attribute_not_exists(seq)",),
}
VERBS = {"PutItem": "Put", "UpdateItem": "Update", "DeleteItem": "Delete"}


def unfenced_writes(operation: str, body: dict, roles: dict[str, str]) -> tuple[str, ...]:
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
        if fence is None or _is_counter(verb, spec, role):
            continue
        if not any(part in spec.get("ConditionExpression", "") for part in fence):
            out.append(f"{verb} on {role} without {' or '.join(fence)}")
    return tuple(out)


def _item_identity(spec: dict, role: str) -> str:
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


class _Raw:
    def __init__(self, data: bytes):
        self._data = data

    def stream(self, **_kwargs) -> Iterator[bytes]:
        yield self._data


def _answer(request, status: int, error_type: str, message: str, **extra) -> AWSResponse:
    """An error answer as DynamoDB sends it (built like faults.py's injected ones)."""
    body = json.dumps({"__type": error_type, "message": f"{message} (injected)", **extra})
    headers = {"x-amzn-requestid": "explore-faults"}
    return AWSResponse(request.url, status, headers, _Raw(body.encode()))


def _cancelled(request, items: tuple[str, ...], hot: set[str]) -> AWSResponse:
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
        self._writes: Counter = Counter()
        self._reads: dict[str, dict[str, int]] = {}
        self._exhausted: set[str] = set()
        self._hot: set[str] = set()

    def __call__(self, request, event_name: str = "", **_kwargs) -> AWSResponse | None:
        operation = event_name.rsplit(".", 1)[-1]
        raw = request.body or b"{}"
        raw = raw.encode() if isinstance(raw, str) else raw
        body = json.loads(raw)
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

    def _inject(self, kind: FaultKind, request, record: CallRecord, shape: CallShape):
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

    def _send(self, request, record: CallRecord) -> AWSResponse:
        response = self.session.send(request)
        record.sent, record.status = True, response.status_code
        return response


# --- one life ----------------------------------------------------------------------------


def client_next(answer: Answer) -> tuple[str | None, int]:
    """What a client following the API contract does after ``answer``: the next request
    (``None``: it stops) and how many seconds it waits first (Retry-After)."""
    if answer.status is None:
        return answer.method, 0  # no answer: send the same request again
    wait = max(answer.retry_after, 1)
    if answer.method == "GET":
        if answer.status == 404:
            return "POST", 0
        return ("GET", wait) if answer.status == 503 else (None, 0)
    if answer.status == 202 and answer.error == "outcome_unknown":
        return "GET", 0
    if answer.status == 503 or (answer.status, answer.error) in RESEND:
        return "POST", wait
    return None, 0


def read_response(answer: Answer, response) -> None:
    answer.status = response.status_code
    retry_after = response.get("Retry-After") or "0"
    answer.retry_after = int(retry_after) if retry_after.isdigit() else 0
    if not response.get("Content-Type", "").startswith("application/json"):
        answer.json = False
        return
    try:
        data = json.loads(response.content)
    except ValueError:
        answer.json = False
        return
    answer.error = data.get("error") if isinstance(data, dict) else None


class Life:
    """One intent's life under one plan: the client's requests, then the system at rest."""

    def __init__(self, session: Session, key: str):
        self.session = session
        self.wire = session.wire
        self.key = key
        self.intent_id = intent_id_for(TENANT, key)
        self.answers: list[Answer] = []
        self.problems: list[Problem] = []
        self.episodes: Counter = Counter()
        self._clock = contextlib.ExitStack()

    def live(self) -> None:
        self.wire.on_stall = self._while_stalled
        with self._clock:  # every advance of the simulated clock is undone at the end
            self._client()
            self._at_rest()

    def _while_stalled(self, point: str) -> None:
        """The world goes on while a worker is paused past its lease: the sweep runs and
        the client, hearing nothing, sends its request again. Its own calls are heard by
        nobody's attempt log but their own (a separate context)."""

        def elsewhere() -> None:
            with attempts.detached():
                self._advance(settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1)
                self._sweep()
                self.answers.append(self._request("POST"))

        contextvars.copy_context().run(elsewhere)

    def _advance(self, seconds: int) -> None:
        self._clock.enter_context(clock.travel(seconds))

    def _begin(self, kind: str) -> str:
        self.episodes[kind] += 1
        episode = f"{kind}#{self.episodes[kind]}"
        self.wire.begin(episode)
        return episode

    def _client(self) -> None:
        method: str | None = "POST"
        for _ in range(MAX_REQUESTS):
            answer = self._request(method)
            self.answers.append(answer)
            method, wait = client_next(answer)
            if method is None:
                return
            self._advance(wait)

    def _request(self, method: str) -> Answer:
        answer = Answer(self._begin(method), method)
        request_id = f"xf-{answer.episode.replace('#', '-')}-{self.key[-8:]}"
        try:
            read_response(answer, self.session.http_call(method, self.key, request_id))
        except faults.SimulatedCrash:
            pass  # the serving process died: the client hears nothing
        except Exception as exc:  # the view let it escape: the client sees an HTML 500
            answer.status, answer.json = 500, False
            answer.escaped = f"{type(exc).__name__}: {exc}"[:300]
        commits = [c for c in self.wire.calls if (c.episode, c.label) == (answer.episode, "commit")]
        answer.commit_applied = any(c.status == 200 for c in commits)
        answer.commit_maybe = any(c.fault in MAY_HAVE_APPLIED for c in commits)
        answer.pledge_exists = self.session.pledge_exists(self.intent_id)
        self._check_episode(answer.episode)
        if (answer.status, answer.error) == (409, "request_in_progress"):
            self._check_not_own_claim(answer.episode, request_id)
        return answer

    def _check_episode(self, episode: str) -> None:
        """Right after an episode that set out to open a case for the intent: its claim
        left the stuck-claim index only with its pledge or its case (DESIGN.md §3), so a
        case that could not be written leaves the claim where the sweep will find it."""
        about = {
            c.case_claim_version for c in self.wire.calls if c.episode == episode and c.case_open
        }
        claim = self.session.claim(self.key)
        if claim is None or claim.get("status") == COMPLETED or claim.get("pending_shard"):
            return
        # The claim as the case opening left it: at the version the case is about, or one
        # further when the opening finalises it (a later writer's claim is not its doing).
        version = int(claim.get("version", 0))
        if not about & {version, version - 1}:
            return
        if claim.get("case_id") in self.session.case_ids(self.intent_id):
            return
        self.problems.append(
            Problem(
                LOST,
                f"{episode}: the claim (v{claim.get('version')}, {claim.get('status')}) left "
                "the stuck-claim index without its case, which could not be written",
            )
        )

    def _check_not_own_claim(self, episode: str, request_id: str) -> None:
        """A request that holds the claim itself (its own claim put or re-claim applied,
        the response lost) must not answer 'in progress' about it: nobody would then hold
        the key for a whole lease."""
        claim = self.session.claim(self.key)
        if claim and claim.get("status") == PENDING and claim.get("correlation_id") == request_id:
            self.problems.append(
                Problem(
                    LOST,
                    f"{episode}: answered 409 request_in_progress for a claim "
                    f"(v{claim.get('version')}) this very request holds",
                )
            )

    def _at_rest(self) -> None:
        past_lease = settings.CLAIM_PENDING_TTL_S + settings.STUCK_GRACE_S + 1
        self._advance(past_lease)
        busy = self._sweep()
        busy = self._dispose_open_cases() or busy
        busy = self._run_retries() or busy
        if busy:
            from reconciliation.services.sweeps import RETRY_STALE_S

            self._advance(RETRY_STALE_S + past_lease)
            self._sweep()
            self._run_retries()

    def _background(self, kind: str, work: Callable[[], Any]) -> Any:
        """One task run or action; a crash or a DynamoDB failure aborts it (and it is run
        again), anything else escaping is a defect."""
        episode = self._begin(kind)
        try:
            return work()
        except faults.SimulatedCrash:
            return ABORTED
        except TOLERATED:
            return ABORTED
        except Exception as exc:
            detail = f"{episode}: {type(exc).__name__} escaped: {exc}"[:300]
            self.problems.append(Problem(ESCAPED, detail))
            return BROKEN
        finally:
            self._check_episode(episode)

    def _sweep(self) -> bool:
        """The beat's sweep; an aborted run is run again, as the next tick would."""
        from reconciliation.services.sweeps import sweep_all

        for run in range(RERUNS):
            report = self._background("sweep", lambda: sweep_all(grace_s=0))
            # A run that could not handle a claim (report.errors) has not completed: the
            # next tick takes it again.
            if report is not ABORTED and not getattr(report, "errors", None):
                return run > 0
        return True

    def _dispose_open_cases(self) -> bool:
        """A person records RETRY_COMMIT on every open case that offers it."""
        disposed = False
        for case in self.session.open_cases(self.intent_id):
            if RETRY_COMMIT not in allowed_actions(
                case["case_type"], case["state"], Role.FINANCE_STAFF
            ):
                continue
            disposed = True
            for _ in range(RERUNS):
                if self._background("dispose", lambda c=case: _dispose(c)) is not ABORTED:
                    break
        return disposed

    def _run_retries(self) -> bool:
        """The retry task for each dispatched case: run again after a crash or a transient
        error (acks_late, autoretry) and after the lease wait it asks for."""
        from reconciliation.services.dispositions import retry_commit_run

        pending, runs = self.session.dispatched, 0
        while pending and runs < MAX_TASK_RUNS:
            case_id, runs = pending[0], runs + 1
            outcome = self._background("retry", lambda c=case_id: retry_commit_run(c))
            if outcome is ABORTED:
                continue
            pending.pop(0)
            if isinstance(outcome, str) and outcome.startswith("wait:"):
                self._advance(int(outcome.removeprefix("wait:")) + 1)
                pending.append(case_id)
        return runs > 0


def _dispose(case: dict) -> str:
    from reconciliation.services.dispositions import case_dispose

    try:
        return case_dispose(
            case_id=case["case_id"],
            disposition=RETRY_COMMIT,
            actor=STAFF,
            seen_version=int(case["version"]),
            reason_code="TRANSIENT_FAILURE",
            reason_text=REASON,
            # The form's action id: submitting it again after a crash is a no-op.
            action_id=f"xf-retry-{case['case_id']}",
        ).message
    except CaseError as exc:
        return f"refused: {exc}"  # the person reads why; nothing to run again


# --- a worker's session ------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    calls: list[CallRecord] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    unfired: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def plan(self) -> tuple[Fault, ...]:
        return scenario_parse(self.scenario)


def scenario_key(sid: str, seed: int) -> str:
    """The scenario's own idempotency key: fresh for each scenario, the same on every
    replay, and always in OWN_SHARD, so the sweep's calls come in one order."""
    base = hashlib.sha256(f"{seed}:{sid}".encode()).hexdigest()[:16]
    for salt in itertools.count():
        key = f"xf-{base}-{salt}"
        if pending_shard(claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)) == OWN_SHARD:
            return key
    raise AssertionError("unreachable")


class _SleeplessTime:
    """``time`` as botocore's endpoint sees it, minus the sleeping between retries."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(_seconds: float) -> None:
        return None


def _quota_always(_self, _capacity_amount: int) -> bool:
    return True


@contextlib.contextmanager
def _simulated_waits() -> Iterator[None]:
    """No real waiting: botocore's retry sleeps are skipped, and its retry quota (a
    client-wide circuit breaker that no single intent drains) stays full, so no scenario
    depends on the ones that ran before it."""
    with (
        mock.patch.object(botocore.endpoint, "time", _SleeplessTime()),
        mock.patch.object(RetryQuota, "acquire", _quota_always),
    ):
        yield


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Injected failures make the system log loudly by design; the matrix says it all."""
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(before)


def _documented_errors() -> frozenset[str]:
    """Outcome kinds the intake view maps to HTTP, plus its own field and auth errors.
    The explorer is a client of the HTTP edge: here and in the token it reaches into
    ``dashboard``, the one place below the edge that does."""
    from dashboard.views.api import STATUS

    return frozenset(STATUS) | VIEW_ERRORS


class Session:
    """One worker's tables, API token and hooks; it runs scenarios one after another and
    resets between them whatever a scenario could leak into the next: the tables are
    emptied, the clock unwound, the wire's plan and counters replaced."""

    def __init__(self, *, endpoint_url: str, prefix: str, seed: int = 0):
        self.endpoint_url = endpoint_url
        self.names = TableNames.from_prefix(prefix)
        self.seed = seed
        self.dispatched: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Session:
        try:
            self._open(self._stack)
        except BaseException:
            self._stack.close()  # nothing of a half-opened session outlives it
            raise
        return self

    def _open(self, stack: contextlib.ExitStack) -> None:
        from reconciliation.tasks.cases import retry_commit_task

        stack.enter_context(override_settings(**self._settings()))
        stack.callback(reset_clients)
        stack.enter_context(_quiet_logs())
        stack.enter_context(_simulated_waits())
        # The retry task runs in the life's own retry episodes, never through a broker.
        stack.enter_context(mock.patch.object(retry_commit_task, "apply_async", self._dispatch))
        faults.set_plan(None)
        reset_clients()
        self.oracle = build_client(regions()[0])  # unhooked: for checks and cleaning
        ensure_tables(self.oracle, self.names)
        stack.callback(drop_tables, self.oracle, self.names)
        self.wire = Wire(self.names)
        dynamodb_client().meta.events.register_first("before-send.dynamodb", self.wire)
        self.http, self.token = self._api_client(stack)
        self.documented = _documented_errors()

    def __exit__(self, *exc_info) -> None:
        self._stack.close()

    def _settings(self) -> dict:
        return {
            "DYNAMODB_ENDPOINT_URL": self.endpoint_url,
            "DDB_TABLE_PREFIX": self.names.idempotency_keys.removesuffix("idempotency_keys"),
            "DDB_REGIONS": "",
            "FAULT_INJECTION": "",
            # Every application retry is still made, at once (full jitter of zero).
            "DDB_APP_RETRY_BASE_S": 0,
        }

    @staticmethod
    def _api_client(stack: contextlib.ExitStack):
        from django.test import Client

        from dashboard.models import ApiToken

        token, raw = ApiToken.issue(TENANT)
        stack.callback(token.delete)
        hosts = [h for h in settings.ALLOWED_HOSTS if h != "*" and not h.startswith(".")]
        return Client(HTTP_HOST=(hosts or ["localhost"])[0]), raw

    def _dispatch(self, args=None, kwargs=None, **_options) -> None:
        self.dispatched.append((args or [None])[0])

    def http_call(self, method: str, key: str, request_id: str = ""):
        auth = {"HTTP_AUTHORIZATION": f"Bearer {self.token}", "secure": True}
        if request_id:
            # The claim records it as its correlation id: the oracle can tell whose it is.
            auth["HTTP_X_REQUEST_ID"] = request_id
        if method == "POST":
            return self.http.post(
                "/api/v1/pledges",
                data=json.dumps(BODY),
                content_type="application/json",
                HTTP_IDEMPOTENCY_KEY=key,
                **auth,
            )
        return self.http.get(f"/api/v1/pledges/{quote(key, safe='')}", **auth)

    def pledge_exists(self, intent_id: str) -> bool:
        item = self.oracle.get_item(
            TableName=self.names.pledges,
            Key={"intent_id": {"S": intent_id}},
            ConsistentRead=True,
        ).get("Item")
        return item is not None

    def claim(self, key: str) -> dict | None:
        item = self.oracle.get_item(
            TableName=self.names.idempotency_keys,
            Key={"pk": {"S": claim_pk(TENANT, OPERATION_CREATE_PLEDGE, key)}},
            ConsistentRead=True,
        ).get("Item")
        return from_item(item) if item else None

    def case_ids(self, intent_id: str) -> set[str]:
        snapshot = Snapshot.scan(self.oracle, self.names, roles=("cases",))
        return {c["case_id"] for c in snapshot.cases() if c["intent_id"] == intent_id}

    def open_cases(self, intent_id: str) -> list[dict]:
        """What a person finds on the queue pages for this intent, oldest id first."""
        snapshot = Snapshot.scan(self.oracle, self.names, roles=("cases",))
        return sorted(
            (c for c in snapshot.cases() if c["intent_id"] == intent_id and c["state"] != RESOLVED),
            key=lambda c: c["case_id"],
        )

    def run(self, plan: tuple[Fault, ...]) -> Result:
        sid = scenario_id(plan)
        started = time.monotonic()
        self.wire.start(plan)
        self.dispatched.clear()
        life = Life(self, scenario_key(sid, self.seed))
        try:
            life.live()
        finally:
            snapshot = Snapshot.scan(self.oracle, self.names)
            self._empty(snapshot)
        problems = life.problems + check_at_rest(
            snapshot,
            intent_id=life.intent_id,
            answers=life.answers,
            case_opens=[c.case_open for c in self.wire.calls if c.case_open],
            unfenced=[(c.point, text) for c in self.wire.calls for text in c.unfenced],
            documented=self.documented,
        )
        return Result(
            sid,
            calls=list(self.wire.calls),
            answers=life.answers,
            problems=problems,
            unfired=[str(f) for f in plan if str(f.point) not in self.wire.fired],
            seconds=time.monotonic() - started,
        )

    def _empty(self, snapshot: Snapshot) -> None:
        for role, attributes in KEY_ATTRIBUTES.items():
            keys = [{a: item[a] for a in attributes} for item in snapshot.raw.get(role, [])]
            table = getattr(self.names, role)
            for start in range(0, len(keys), 25):
                request = {table: [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]}
                while request:
                    request = self.oracle.batch_write_item(RequestItems=request).get(
                        "UnprocessedItems"
                    )


def run_guarded(session: Session, sid: str) -> Result:
    """A scenario the explorer itself could not run is reported, never silently dropped."""
    try:
        return session.run(scenario_parse(sid))
    except (Exception, faults.SimulatedCrash) as exc:
        detail = f"the explorer could not run it: {type(exc).__name__}: {exc}"[:300]
        return Result(sid, problems=[Problem("explorer", detail)])


# --- which scenarios ---------------------------------------------------------------------


def applicable(call: CallRecord, kind: str) -> bool:
    return call.write or kind not in WRITE_ONLY


def first_calls(calls: Iterable[CallRecord]) -> list[CallRecord]:
    """Each point once, at its first call, in the order of the life."""
    seen: dict[str, CallRecord] = {}
    for call in calls:
        seen.setdefault(call.point, call)
    return list(seen.values())


def depth_one(baseline: Result) -> list[str]:
    """Every applicable fault kind at every point of the fault-free life."""
    return [
        scenario_id([Fault(Point.parse(call.point), kind)])
        for call in first_calls(baseline.calls)
        for kind in FAULT_KINDS
        if applicable(call, kind)
    ]


def second_faults(result: Result, *, later_writes: bool = False) -> list[str]:
    """Every second fault at every later point of the first fault's own episode, as the
    first fault's scenario recorded it. Pruned: points after the episode ended, and a
    throttle on a call that the first fault already throttles past its budget.

    With ``later_writes``, also every write of the life's later episodes (the client's next
    requests, the sweeps, a person's disposition, the retry task): other requests and
    processes at another time, whose failures do not end with the first one's episode."""
    (first,) = result.plan
    calls = result.calls
    at = next(
        (i for i, c in enumerate(calls) if c.point == str(first.point) and c.fault == first.kind),
        None,
    )
    if at is None:
        return []
    exhausted = calls[at].digest if first.kind in EXHAUSTING else None
    # A point met before the first fault (a deduplicated read) would fire before it.
    seen = {c.point for c in calls[: at + 1]}
    after = [c for c in calls[at + 1 :] if c.point not in seen]
    same = list(itertools.takewhile(lambda c: c.episode == first.point.episode, after))
    if later_writes:
        same += [c for c in after[len(same) :] if c.write]
    out = []
    for call in first_calls(same):
        for kind in FAULT_KINDS:
            if not applicable(call, kind) or (kind in THROTTLES and call.digest == exhausted):
                continue
            out.append(scenario_id([first, Fault(Point.parse(call.point), kind)]))
    return out


def matches(sid: str, pattern: str | None) -> bool:
    return not pattern or fnmatch.fnmatchcase(sid, pattern) or pattern in sid


def exact_plan(pattern: str | None) -> tuple[Fault, ...] | None:
    """``--only`` naming one scenario exactly (a repro line) runs it, whatever the depth."""
    if not pattern or any(ch in pattern for ch in "*?["):
        return None
    try:
        return scenario_parse(pattern)
    except ValueError:
        return None


# --- running them ------------------------------------------------------------------------


class Progress:
    """What the command shows while it runs; silent by default."""

    def add(self, count: int) -> None:
        return None

    def done(self, result: Result) -> None:
        return None


class LocalRunner:
    """Scenarios in this process: a test's monkeypatches and database apply to them."""

    def __init__(self, setup: dict):
        self.session = Session(**setup)

    def __enter__(self) -> LocalRunner:
        self.session.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.session.__exit__(*exc_info)

    def map(self, ids: list[str], progress: Progress) -> list[Result]:
        progress.add(len(ids))
        results = []
        for sid in ids:
            results.append(run_guarded(self.session, sid))
            progress.done(results[-1])
        return results


def _worker_main(tasks, results, setup: dict, settings_module: str) -> None:
    """A spawned worker: Django with a private in-memory database (its API token never
    lands in the configured one), its own tables, then scenarios until told to stop."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ["DATABASE_URL"] = "sqlite://:memory:"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    with Session(**setup) as session:
        while (item := tasks.get()) is not None:
            index, sid = item
            results.put((index, run_guarded(session, sid)))


class ProcessRunner:
    """Scenarios spread over N spawned worker processes (one table set each)."""

    def __init__(self, setup: dict, workers: int):
        context = multiprocessing.get_context("spawn")
        self.tasks, self.results = context.Queue(), context.Queue()
        self.processes = [
            context.Process(
                target=_worker_main,
                args=(
                    self.tasks,
                    self.results,
                    {**setup, "prefix": f"{setup['prefix']}w{n}-"},
                    # Under override_settings the module is not on the holder.
                    os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE,
                ),
                daemon=True,
            )
            for n in range(workers)
        ]

    def __enter__(self) -> ProcessRunner:
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *exc_info) -> None:
        for _ in self.processes:
            self.tasks.put(None)
        for process in self.processes:
            process.join(timeout=60)
            if process.is_alive():
                process.terminate()

    def map(self, ids: list[str], progress: Progress) -> list[Result]:
        progress.add(len(ids))
        for item in enumerate(ids):
            self.tasks.put(item)
        out: list[Result | None] = [None] * len(ids)
        for _ in ids:
            index, result = self._next()
            out[index] = result
            progress.done(result)
        return out  # type: ignore[return-value]

    def _next(self) -> tuple[int, Result]:
        while True:
            try:
                return self.results.get(timeout=2)
            except queue.Empty:
                dead = [p.exitcode for p in self.processes if p.exitcode is not None]
                if dead:
                    raise RuntimeError(f"an explorer worker died (exit codes {dead})") from None


# --- the exploration ---------------------------------------------------------------------


@dataclass(frozen=True)
class ExploreConfig:
    depth: int = 1
    seed: int = 0
    only: str | None = None
    workers: int = 1  # 0: in this process (the caller provides the database)
    endpoint_url: str | None = None
    later_writes: bool = True  # depth 2 also faults every write of the later episodes


@contextlib.contextmanager
def _engine(endpoint_url: str | None) -> Iterator[str]:
    """The configured DynamoDB Local, or one of our own for the run."""
    if endpoint_url:
        yield endpoint_url
        return
    from reconciliation.dynamo.local import start_dynamodb_local

    engine = start_dynamodb_local()
    try:
        yield engine.endpoint_url
    finally:
        engine.stop()


def explore(config: ExploreConfig, progress: Progress | None = None) -> Exploration:
    started = time.monotonic()
    progress = progress or Progress()
    endpoint = config.endpoint_url or settings.DYNAMODB_ENDPOINT_URL
    with _engine(endpoint) as url:
        setup = {"endpoint_url": url, "prefix": f"xf{uuid.uuid4().hex[:8]}-", "seed": config.seed}
        runner = ProcessRunner(setup, config.workers) if config.workers else LocalRunner(setup)
        with runner:
            results = _scenarios(config, runner, progress)
    return Exploration(config, results, time.monotonic() - started)


def _scenarios(config: ExploreConfig, runner, progress: Progress) -> list[Result]:
    exact = exact_plan(config.only)
    if exact is not None:
        return runner.map([scenario_id(exact)], progress)
    baseline = runner.map([FAULT_FREE], progress)[0]
    firsts = depth_one(baseline)
    wanted = [sid for sid in firsts if matches(sid, config.only)]
    # Depth 2 needs every first fault's own life to know where a second can go.
    level_one = runner.map(firsts if config.depth == 2 else wanted, progress)
    results = [r for r in (baseline, *level_one) if matches(r.scenario, config.only)]
    if config.depth == 2:
        seconds = [
            sid
            for result in level_one
            for sid in second_faults(result, later_writes=config.later_writes)
            if matches(sid, config.only)
        ]
        results += runner.map(seconds, progress)
    return results


@dataclass
class Exploration:
    config: ExploreConfig
    results: list[Result]
    seconds: float

    @property
    def violations(self) -> list[Result]:
        return [r for r in self.results if r.problems]

    def summary(self) -> str:
        return f"explore_faults: {len(self.results)} scenarios, {len(self.violations)} violations"

    def lines(self) -> list[str]:
        out = matrix_lines(self.results)
        for result in self.violations:
            shown = "; ".join(str(p) for p in result.problems[:3])
            more = f" (+{len(result.problems) - 3} more)" if len(result.problems) > 3 else ""
            out.append(f"explore_faults --only '{result.scenario}'  ✗ {shown}{more}")
        unfired = [f for r in self.results for f in r.unfired]
        if unfired:
            out.append(f"note: {len(unfired)} planned faults never fired, e.g. {unfired[0]}")
        workers = self.config.workers or "in-process"
        later = " + later writes" if self.config.later_writes and self.config.depth == 2 else ""
        out.append(f"depth {self.config.depth}{later}, {self.seconds:.0f} s, workers: {workers}")
        out.append(self.summary())
        return out


def matrix_lines(results: list[Result]) -> list[str]:
    """Rows: the call point of each scenario's last fault; columns: fault kinds; a cell
    counts its scenarios: ``ok``, ``2✗`` (violations), ``-`` (not applicable)."""
    tally: dict[tuple[str, str], list[int]] = {}
    writes: dict[str, bool] = {}
    for result in results:
        for call in result.calls:
            writes.setdefault(call.point, call.write)
        if result.plan:
            last = result.plan[-1]
            cell = tally.setdefault((str(last.point), last.kind), [0, 0])
            cell[0] += 1
            cell[1] += bool(result.problems)
    rows = list(dict.fromkeys(point for point, _ in tally))
    width = max([len(r) for r in rows] + [10])
    legend = ", ".join(f"{short} {kind}" for kind, short in COLUMNS.items())
    out = [
        f"columns: {legend}",
        f"{'call point':<{width}} | " + " ".join(f"{c:>6}" for c in COLUMNS.values()),
    ]
    for row in rows:
        cells = [_cell(tally.get((row, kind)), writes.get(row, True), kind) for kind in KINDS]
        out.append(f"{row:<{width}} | " + " ".join(f"{c:>6}" for c in cells))
    baseline = next((r for r in results if not r.plan), None)
    if baseline is not None:
        verdict = "✗" if baseline.problems else "ok"
        out.append(f"fault-free life: {len(baseline.calls)} calls, {verdict}")
    return out


def _cell(tally: list[int] | None, write: bool, kind: str) -> str:
    if tally is None:
        return "." if write or kind not in WRITE_ONLY else "-"
    count, bad = tally
    if bad:
        return f"{bad}✗" if count == 1 else f"{bad}✗/{count}"
    return "ok" if count == 1 else f"ok×{count}"
