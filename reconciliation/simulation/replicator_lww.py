"""Last writer wins for the Global Tables stand-in (``replicator.py``): which version of
an item every region must end up holding, which writes to make for that, and how the
stand-in recognises its own writes when they come back through a region's stream; and
the ReplicationLatency samples behind its log lines.

Pure bookkeeping (no I/O), so the rules are tested without an engine.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
import random
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# An item as DynamoDB's low-level API spells it ({"attr": {"S": "..."}}); None: absent.
Image = dict[str, Any] | None

TOMBSTONE = "tombstone"


def _number(text: str) -> str:
    """A number as one text whatever its spelling: DynamoDB Local keeps ``110.90`` from
    an ``ADD`` but stores and streams ``110.9`` when the same image is put, so the
    stand-in's own write would otherwise come back looking like another write."""
    return format(Decimal(text).normalize(), "f")


def _canonical(value: Any) -> Any:
    """A form of an attribute value whose JSON is the same however the engine ordered a
    set's members, encoded a binary or spelled a number."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        out = {k: _canonical(v) for k, v in value.items()}
        if isinstance(out.get("N"), str):
            out["N"] = _number(out["N"])
        if isinstance(out.get("NS"), list):
            out["NS"] = [_number(n) for n in out["NS"]]
        for kind in ("SS", "NS", "BS"):
            if kind in out:
                out[kind] = sorted(out[kind])
        return out
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def digest(image: Image) -> str:
    """A stable fingerprint of an item's whole content (``TOMBSTONE`` when absent)."""
    if image is None:
        return TOMBSTONE
    text = json.dumps(_canonical(image), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


MAX_LAG_MS = 3_600_000


@dataclass(frozen=True)
class Lag:
    """How long a change waits before it is applied to another region: fixed, or drawn
    uniformly per change from ``low_ms``–``high_ms``."""

    low_ms: int
    high_ms: int

    @classmethod
    def parse(cls, text: str | int) -> Lag:
        match = re.fullmatch(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?", str(text))
        if not match:
            raise ValueError(f"lag {str(text)[:40]!r}: milliseconds, N or LOW-HIGH")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise ValueError(f"lag {text!r}: LOW-HIGH with LOW <= HIGH")
        if high > MAX_LAG_MS:
            # A lag is a test of replication, not a pause for days (nor past a float).
            raise ValueError(f"lag {text!r}: at most {MAX_LAG_MS} ms")
        return cls(low, high)

    def draw(self, rng: random.Random) -> float:
        """One change's lag, in seconds."""
        if self.high_ms == self.low_ms:
            return self.low_ms / 1000
        return rng.uniform(self.low_ms, self.high_ms) / 1000

    def __str__(self) -> str:
        return f"{self.low_ms}" if self.low_ms == self.high_ms else f"{self.low_ms}-{self.high_ms}"


@dataclass(frozen=True)
class Version:
    """One write of one item: when (``at``, epoch seconds), in which region (``rank``, its
    position in ``DDB_REGIONS``) and what it left (``image``; ``None`` is a tombstone)."""

    at: float
    rank: int
    image: Image
    digest: str

    def beats(self, other: Version) -> bool:
        """Last writer wins; a tie goes to the region listed later."""
        return (self.at, self.rank) > (other.at, other.rank)


@dataclass(order=True)
class Apply:
    """A write the stand-in owes ``destination``: ``version`` of the item at ``keys``."""

    due: float
    seq: int
    destination: int = field(compare=False)
    table: str = field(compare=False)
    keys: dict[str, Any] = field(compare=False)
    version: Version = field(compare=False)


@dataclass(frozen=True)
class Change:
    """One stream record, reduced to what replication needs."""

    table: str
    keys: dict[str, Any]
    old_image: Image
    new_image: Image
    created: float  # ApproximateCreationDateTime, epoch seconds (0 when absent)
    seen: float  # when the stand-in read it


def key_id(keys: dict[str, Any]) -> str:
    return digest(keys)


class Resolver:
    """The per-item tracker: the winning version of every item changed since start,
    the writes still owed (each due no earlier than its lag after the change was seen)
    and the stand-in's own writes expected back in a region's stream (echoes)."""

    def __init__(self, region_count: int, lag: Lag, rng: random.Random | None = None):
        self.region_count = region_count
        self.lag = lag
        self.rng = rng or random.Random()
        self.winners: dict[tuple[str, str], Version] = {}
        self.pending: list[Apply] = []
        self._seq = 0
        # (region, table, key id) → [(old digest, new digest)] of writes made there.
        self.echoes: dict[tuple[int, str, str], list[tuple[str, str]]] = defaultdict(list)
        self.echoes_dropped = 0
        self.conflicts_lost = 0
        self.clocks = [0.0] * region_count

    def observe(self, region: int, change: Change) -> list[Apply]:
        """Take one record of ``region``'s stream; return the writes it makes owed."""
        kid = key_id(change.keys)
        item = (change.table, kid)
        old, new = digest(change.old_image), digest(change.new_image)
        winner = self.winners.get(item)
        echo_key = (region, change.table, kid)
        expected = self.echoes.get(echo_key)
        if expected and (old, new) in expected:
            # The stand-in's own write: never replicated back. If a newer version won
            # meanwhile (the write overtook a local change), the region is owed it.
            expected.remove((old, new))
            if not expected:
                del self.echoes[echo_key]
            self.echoes_dropped += 1
            if winner is not None and winner.digest != new:
                return [self._owe(region, change, winner)]
            return []
        # The real service stamps a write in the region that takes it; DynamoDB Local
        # rounds ApproximateCreationDateTime down to the minute, so the time the record
        # was read bounds it from above, and the record's own stamp from below.
        # Records of one region are in write order (one stream, read in sequence): each
        # is stamped strictly after the one before, even when read in the same batch.
        at = max(change.created, change.seen, self.clocks[region] + 1e-6)
        self.clocks[region] = at
        version = Version(at, region, change.new_image, new)
        if winner is None or version.beats(winner):
            self.winners[item] = version
            return [
                self._owe(other, change, version)
                for other in range(self.region_count)
                if other != region
            ]
        # A later write from elsewhere is already known: this region converges to it.
        self.conflicts_lost += 1
        return [self._owe(region, change, winner)]

    def _owe(self, destination: int, change: Change, version: Version) -> Apply:
        self._seq += 1
        owed = Apply(
            change.seen + self.lag.draw(self.rng),
            self._seq,
            destination,
            change.table,
            change.keys,
            version,
        )
        heapq.heappush(self.pending, owed)
        return owed

    def due(self, now: float) -> list[Apply]:
        """The owed writes whose time has come and whose version still wins (one that
        lost meanwhile is dropped: its successor is owed on its own)."""
        out: list[Apply] = []
        while self.pending and self.pending[0].due <= now:
            owed = heapq.heappop(self.pending)
            winner = self.winners.get((owed.table, key_id(owed.keys)))
            if winner is not None and winner.digest == owed.version.digest:
                out.append(owed)
        return out

    def next_due(self) -> float | None:
        return self.pending[0].due if self.pending else None

    def retry(self, owed: Apply, at: float) -> None:
        """A write that failed (engine unreachable): owed again at ``at``."""
        self._seq += 1
        owed.due, owed.seq = at, self._seq
        heapq.heappush(self.pending, owed)

    def applied(self, owed: Apply, old_image: Image) -> None:
        """Record a write made to ``owed.destination`` that found ``old_image`` there. A
        write that changed nothing leaves no stream record, so nothing is expected back."""
        old = digest(old_image)
        if old != owed.version.digest:
            self.echoes[(owed.destination, owed.table, key_id(owed.keys))].append(
                (old, owed.version.digest)
            )

    def settled(self) -> bool:
        """No write owed and none of the stand-in's writes still to come back."""
        return not self.pending and not self.echoes


class LatencyStats:
    """ReplicationLatency samples kept for the log lines (the metric has them all)."""

    def __init__(self, keep: int = 100_000):
        self.samples: dict[tuple[str, str, str], deque[float]] = defaultdict(
            lambda: deque(maxlen=keep)
        )
        self.since: dict[str, list[float]] = defaultdict(list)

    def add(self, table: str, source: str, destination: str, seconds: float) -> None:
        self.samples[(table, source, destination)].append(seconds)
        self.since[table].append(seconds)

    @staticmethod
    def line(label: str, values: list[float]) -> str:
        ordered = sorted(values)
        p50 = ordered[len(ordered) // 2]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"ReplicationLatency {label} n={len(ordered)} p50={p50 * 1000:.0f}ms "
            f"p99={p99 * 1000:.0f}ms max={ordered[-1] * 1000:.0f}ms"
        )

    def periodic_lines(self) -> list[str]:
        """One line per table for the samples since the previous call."""
        lines = [self.line(f"table={t}", v) for t, v in sorted(self.since.items()) if v]
        self.since.clear()
        return lines

    def summary_lines(self) -> list[str]:
        return [
            self.line(f"table={t} {s}->{d}", list(v))
            for (t, s, d), v in sorted(self.samples.items())
            if v
        ]

    def all_values(self) -> list[float]:
        return [x for v in self.samples.values() for x in v]
