"""Reconciliation cases as values: case types, states and queues, case ids, the
``Case`` record and its item translation, and the per-queue counter keys. The
repository that reads and writes them is :mod:`reconciliation.cases.repository`
(which re-exports these names)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, overload

from reconciliation.dynamo.items import from_item, to_item

if TYPE_CHECKING:
    pass

STUCK_PENDING = "STUCK_PENDING"
AMBIGUOUS_TIMEOUT = "AMBIGUOUS_TIMEOUT"
CANCELLED_TRANSACTION = "CANCELLED_TRANSACTION"
TOKEN_MISMATCH = "TOKEN_MISMATCH"
CASE_TYPES = (STUCK_PENDING, AMBIGUOUS_TIMEOUT, CANCELLED_TRANSACTION, TOKEN_MISMATCH)

OPEN = "OPEN"
ESCALATED = "ESCALATED"
OVERRIDE_REQUESTED = "OVERRIDE_REQUESTED"
RESOLVED = "RESOLVED"

# Queues are the case types, plus two for cases a human moved on.
QUEUE_ESCALATED = "ESCALATED"
QUEUE_APPROVAL = "OVERRIDE_REQUESTED"
QUEUES = (*CASE_TYPES, QUEUE_ESCALATED, QUEUE_APPROVAL)
COUNTER_PREFIX = "#COUNT#"
COUNTER_SHARDS = 8
WALK_PAGE = 100  # rows a page when a sweep walks a whole queue
# What case_id_for makes: "C-" and 16 base32 characters. Counter items share the table
# (``#COUNT#<QUEUE>#<n>``, and ``#COUNT#<QUEUE>`` in older tables), and a typed id may be
# longer than DynamoDB's 2,048-byte key (a ValidationException): neither is a case.
CASE_ID_PATTERN = "C-[A-Z2-7]{16}"
_CASE_ID_RE = re.compile(CASE_ID_PATTERN)


# Case types that ask one question about a claim version share its case: a stuck claim
# whose late worker then times out is still one "did it commit?" question, answered once.
# That question keeps the id derivation cases had before types were part of it.
DID_IT_COMMIT = frozenset({STUCK_PENDING, AMBIGUOUS_TIMEOUT})


def case_question(case_type: str) -> str:
    """The question a case of ``case_type`` asks; one case per question and claim version."""
    return "did_it_commit" if case_type in DID_IT_COMMIT else case_type


def case_id_for(source: str, version: int, case_type: str) -> str:
    """Stable id from the source (claim key + version) and the question the case asks:
    ``C-`` and 16 base32 characters. A late worker's TOKEN_MISMATCH on a claim version the
    sweep already opened as STUCK_PENDING is a different problem, so a case of its own."""
    question = case_question(case_type)
    suffix = "" if question == "did_it_commit" else f"#{question}"
    digest = hashlib.sha256(f"{source}@{version}{suffix}".encode()).digest()
    return "C-" + base64.b32encode(digest).decode()[:16]


def is_case_id(value: str) -> bool:
    """Whether ``value`` has the shape of a case id (the whole string, no newline)."""
    return isinstance(value, str) and _CASE_ID_RE.fullmatch(value) is not None


def counter_key(queue: str, shard: int) -> str:
    return f"{COUNTER_PREFIX}{queue}#{shard % COUNTER_SHARDS}"


def counter_keys() -> list[dict]:
    """Every counter item of every queue: its shards, and the unsharded item that tables
    written before sharding still hold."""
    return [
        {"case_id": {"S": key}}
        for q in QUEUES
        for key in (COUNTER_PREFIX + q, *(counter_key(q, n) for n in range(COUNTER_SHARDS)))
    ]


def counter_shard(case_id: str) -> int:
    """The shard a case's counter moves start on (a retry moves on to the next)."""
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16) % COUNTER_SHARDS


def queue_for(case_type: str, state: str) -> str | None:
    if state == RESOLVED:
        return None
    if state == ESCALATED:
        return QUEUE_ESCALATED
    if state == OVERRIDE_REQUESTED:
        return QUEUE_APPROVAL
    return case_type


@dataclass(frozen=True)
class Case:
    case_id: str
    case_type: str
    state: str
    version: int
    opened_at: str
    claim_pk: str
    claim_version: int
    intent_id: str
    tenant: str
    fund: str
    amount: Decimal
    currency: str
    request_token: str
    token_issued_at: str
    audit_seq: int
    audit_head: str
    queue: str | None = None
    queue_sort: str | None = None
    decoded: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    client_outcome: dict = field(default_factory=dict)
    last_actor: str = "system"
    last_action_at: str = ""
    assignee: str | None = None
    override: dict | None = None
    resolution: dict | None = None
    last_action_id: str | None = None
    request: dict = field(default_factory=dict)
    retry: dict | None = None

    @property
    def idempotency_key(self) -> str:
        return self.intent_id.split("#", 1)[1]

    def summary(self) -> dict:
        return {
            "state": self.state,
            "version": self.version,
            "queue": self.queue,
            "assignee": self.assignee,
            "override": self.override,
            "resolution": self.resolution,
        }


_JSON_FIELDS = (
    "decoded",
    "evidence",
    "client_outcome",
    "override",
    "resolution",
    "request",
    "retry",
)


def decoded_row(item: Mapping[str, Any]) -> dict[str, Any]:
    """Plain values of a stored case or index row, JSON fields parsed."""
    data = from_item(item)
    for name in _JSON_FIELDS:
        if isinstance(data.get(name), str):
            data[name] = json.loads(data[name])
    return data


@overload
def case_from_item(item: Mapping[str, Any]) -> Case: ...
@overload
def case_from_item(item: Mapping[str, Any] | None) -> Case | None: ...
def case_from_item(item: Mapping[str, Any] | None) -> Case | None:
    if item is None:
        return None
    data = decoded_row(item)
    data["amount"] = Decimal(str(data.get("amount", 0)))
    known = Case.__dataclass_fields__
    return Case(**{k: v for k, v in data.items() if k in known})


def case_to_item(case: Case) -> dict:
    data: dict[str, Any] = {k: getattr(case, k) for k in Case.__dataclass_fields__}
    for name in _JSON_FIELDS:
        # Kept as JSON text: free-form evidence must never trip DynamoDB's type rules
        # (floats, empty sets) and is read back exactly as written.
        if data[name] is not None:
            data[name] = json.dumps(data[name], sort_keys=True, default=str)
    return to_item(data)
