"""The explorer's words: the fault kinds and what each does, the call points a plan names,
scenario ids (a scenario id alone replays it) and the matrix's columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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
# After these the caller cannot tell whether the call took effect (docs/design.md §4).
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
