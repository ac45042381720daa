"""The per-queue case counters: their keys and shards, the moves a case transaction
makes on them, and what a queue's counter items add up to. Counter items share the
cases table (``#COUNT#<QUEUE>#<n>``, and ``#COUNT#<QUEUE>`` in older tables). Each
region keeps its own, named for it (``#COUNT#<QUEUE>@<region>#<n>``; the first region's
name none): a counter written from two regions would lose concurrent moves under
Global Tables, so a region's counters move only with its own cases.

The drill's cases (``DRILL_TENANT``) are counted like any other, and their share is kept
apart on the same items (``drill_open_count``, ``drill_totalled``, ``drill_amount_<CUR>``),
moved in the same ADD, so a page can leave the drill out of its counts and amounts
without reading a case. Only a case marked ``drill_tallied`` moves that share."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from reconciliation.cases.vocabulary import QUEUES, Queue

if TYPE_CHECKING:
    from reconciliation.cases.models import Case

COUNTER_PREFIX = "#COUNT#"
COUNTER_SHARDS = 8


def counter_key(queue: Queue, shard: int, region_tag: str = "") -> str:
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


DRILL_PREFIX = "drill_"


def totals_attribute(currency: str, *, drill: bool = False) -> str:
    """The counter item attribute holding one currency's amount total (the drill's
    share of it with ``drill``)."""
    return f"{DRILL_PREFIX if drill else ''}amount_{currency}"


@dataclass(frozen=True)
class CounterMove:
    """One queue's counter move in a case transaction: the count by ``delta`` and, when
    the case is in the totals (``Case.in_totals``), its amount in its currency."""

    queue: Queue
    delta: int
    currency: str = ""
    amount: Decimal | None = None
    drill: bool = False  # the drill's share moves too (``Case.drill_tallied``)


def counter_moves(case: Case, before: Queue | None, after: Queue | None) -> list[CounterMove]:
    """The counter moves of ``case`` going from queue ``before`` to ``after``."""
    moves: list[CounterMove] = []
    if before == after:
        return moves
    totalled = bool(case.in_totals and case.currency)
    currency, amount = (case.currency, case.amount) if totalled else ("", None)
    drill = case.drill_tallied
    if before:
        negated = -amount if amount is not None else None
        moves.append(CounterMove(before, -1, currency, negated, drill=drill))
    if after:
        moves.append(CounterMove(after, +1, currency, amount, drill=drill))
    return moves


@dataclass
class QueueCounter:
    """What a queue's counter items hold: its open cases, how many of them are in the
    amount totals (cases opened before totals were kept are not), and the totals."""

    count: int = 0
    totalled: int = 0
    amounts: dict[str, Decimal] = field(default_factory=dict)
    # The drill's share of the three above (``drill_*`` attributes), kept apart.
    drill_count: int = 0
    drill_totalled: int = 0
    drill_amounts: dict[str, Decimal] = field(default_factory=dict)

    @property
    def untotalled(self) -> int:
        return max(0, self.count - self.totalled)

    def add(self, item: Mapping[str, Any]) -> None:
        self.count += int(item.get("open_count", 0))
        self.totalled += int(item.get("totalled", 0))
        self.drill_count += int(item.get(DRILL_PREFIX + "open_count", 0))
        self.drill_totalled += int(item.get(DRILL_PREFIX + "totalled", 0))
        for name, value in item.items():
            bare = name.removeprefix(DRILL_PREFIX)
            if bare.startswith("amount_"):
                into = self.amounts if bare == name else self.drill_amounts
                currency = bare.removeprefix("amount_")
                into[currency] = into.get(currency, Decimal(0)) + Decimal(str(value))

    def merge(self, other: QueueCounter) -> None:
        """Add ``other``'s counts and totals (another region's, another queue's)."""
        self.count += other.count
        self.totalled += other.totalled
        self.drill_count += other.drill_count
        self.drill_totalled += other.drill_totalled
        for mine, theirs in (
            (self.amounts, other.amounts),
            (self.drill_amounts, other.drill_amounts),
        ):
            for currency, amount in theirs.items():
                mine[currency] = mine.get(currency, Decimal(0)) + amount

    def without_drill(self) -> QueueCounter:
        """The real cases alone: the drill's share taken away (as the pages show it
        unless asked for the drill's data)."""
        return QueueCounter(
            count=max(0, self.count - self.drill_count),
            totalled=max(0, self.totalled - self.drill_totalled),
            amounts={c: a - self.drill_amounts.get(c, Decimal(0)) for c, a in self.amounts.items()},
        )

    def shown_amounts(self) -> list[tuple[str, Decimal]]:
        """The non-zero totals, by currency code."""
        return sorted((c, a) for c, a in self.amounts.items() if a)


def counter_shard(case_id: str) -> int:
    """The shard a case's counter moves start on (a retry moves on to the next)."""
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16) % COUNTER_SHARDS
