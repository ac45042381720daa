"""The search of ``explore_faults --actors 2``: which pairs of hands run, which of their
schedules within the pre-emption bound (all, or a seeded share a pair), and the depth-1
faults tried at every call of their serial schedules. Each schedule itself runs in a
:class:`~.hands.HandsSession`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from reconciliation.simulation.explorer.catalogue import ActorSpec, catalogue, pairs
from reconciliation.simulation.explorer.hands import HandsSession, ScheduleResult
from reconciliation.simulation.explorer.receiver import RECEIVER_FAULTS, SEND
from reconciliation.simulation.explorer.schedule import (
    BOUND,
    Child,
    Frontier,
    children,
    level_quotas,
    marked_children,
    sample_level,
)
from reconciliation.simulation.explorer.session import explorer_engine
from reconciliation.simulation.explorer.wire import HandCall
from reconciliation.simulation.invariants import Problem

# The fault kinds tried at every write of the serial schedules: a write applied whose
# answer is lost, throttling past the budget, a transaction cancelled by a conflict, and
# the process dying right after the call.
HAND_FAULTS = ("timeout_after", "throttle_exhausted", "conflict", "crash_after")
# At the reads of a hand that faults them (the dispatcher's due query and pledge read).
READ_FAULTS = ("throttle_exhausted",)


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
