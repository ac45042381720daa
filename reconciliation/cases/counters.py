"""The per-queue case counters: their keys and shards, the moves a case transaction
makes on them, and what a queue's counter items add up to. Counter items share the
cases table (``#COUNT#<QUEUE>#<n>``, and ``#COUNT#<QUEUE>`` in older tables). Each
region keeps its own, named for it (``#COUNT#<QUEUE>@<region>#<n>``; the first region's
name none): a counter written from two regions would lose concurrent moves under
Global Tables, so a region's counters move only with its own cases."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from reconciliation.cases.vocabulary import QUEUES

if TYPE_CHECKING:
    from reconciliation.cases.models import Case

COUNTER_PREFIX = "#COUNT#"
COUNTER_SHARDS = 8


def counter_key(queue: str, shard: int, region_tag: str = "") -> str:
    where = f"@{region_tag}" if region_tag else ""
    return f"{COUNTER_PREFIX}{queue}{where}#{shard % COUNTER_SHARDS}"


def counter_keys(region_tag: str = "") -> list[dict[str, dict[str, str]]]:
    """Every counter item of every queue in the region tagged ``region_tag``: its
    shards, and (first region) the unsharded item that tables written before sharding
    still hold."""
    older = () if region_tag else tuple(COUNTER_PREFIX + q for q in QUEUES)
    return [{"case_id": {"S": key}} for key in older] + [
        {"case_id": {"S": counter_key(q, n, region_tag)}}
        for q in QUEUES
        for n in range(COUNTER_SHARDS)
    ]


def counter_queue(counter_id: str) -> str:
    """The queue a counter item counts, from its key."""
    return counter_id.removeprefix(COUNTER_PREFIX).split("#", 1)[0].split("@", 1)[0]


def totals_attribute(currency: str) -> str:
    """The counter item attribute holding one currency's amount total."""
    return f"amount_{currency}"


@dataclass(frozen=True)
class CounterMove:
    """One queue's counter move in a case transaction: the count by ``delta`` and, when
    the case is in the totals (``Case.in_totals``), its amount in its currency."""

    queue: str
    delta: int
    currency: str = ""
    amount: Decimal | None = None


def counter_moves(case: Case, before: str | None, after: str | None) -> list[CounterMove]:
    """The counter moves of ``case`` going from queue ``before`` to ``after``."""
    moves: list[CounterMove] = []
    if before == after:
        return moves
    money = (case.currency, case.amount) if case.in_totals and case.currency else ("", None)
    if before:
        moves.append(CounterMove(before, -1, money[0], -money[1] if money[1] is not None else None))
    if after:
        moves.append(CounterMove(after, +1, *money))
    return moves


@dataclass
class QueueCounter:
    """What a queue's counter items hold: its open cases, how many of them are in the
    amount totals (cases opened before totals were kept are not), and the totals."""

    count: int = 0
    totalled: int = 0
    amounts: dict[str, Decimal] = field(default_factory=dict)

    @property
    def untotalled(self) -> int:
        return max(0, self.count - self.totalled)

    def add(self, item: Mapping[str, Any]) -> None:
        self.count += int(item.get("open_count", 0))
        self.totalled += int(item.get("totalled", 0))
        for name, value in item.items():
            if name.startswith("amount_"):
                currency = name.removeprefix("amount_")
                self.amounts[currency] = self.amounts.get(currency, Decimal(0)) + Decimal(
                    str(value)
                )

    def shown_amounts(self) -> list[tuple[str, Decimal]]:
        """The non-zero totals, by currency code."""
        return sorted((c, a) for c, a in self.amounts.items() if a)


def counter_shard(case_id: str) -> int:
    """The shard a case's counter moves start on (a retry moves on to the next)."""
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16) % COUNTER_SHARDS
