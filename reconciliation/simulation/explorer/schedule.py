"""A deterministic scheduler for actors run in threads, and the enumeration of schedules
under a pre-emption bound (CHESS's iterative context bounding; Coyote's prioritised
strategies work the same way).

Each actor runs in a thread of its own, but only one runs at a time: a single condition
hands the turn over. An actor gives its turn back at every *yield point* (the explorer's
``before-send`` hook, so just before each DynamoDB call) and when it ends; the scheduler
then chooses who runs next. A schedule is the sequence of those choices. Choosing another
actor while the one that ran could have gone on is a *pre-emption*; choosing after an
actor ended, or at the very start, is free.

Enumeration is stateless and depth-first over the choice tree, in rounds of increasing
pre-emptions (every schedule with 0 first, then 1, then 2): a schedule is replayed from
its prefix of choices, and its children differ at one later choice. Bounded at 2: CHESS
found that almost every concurrency bug it found shows with at most two pre-emptions,
and the number of schedules grows polynomially in the yield points with the bound, not
exponentially.
"""

from __future__ import annotations

import heapq
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

BOUND = 2
TURN_TIMEOUT_S = 60.0  # an actor that neither yields nor ends within this is reported


class ScheduleStuck(RuntimeError):
    """An actor kept its turn past ``TURN_TIMEOUT_S`` (a deadlock, or a call that hangs)."""


@dataclass(frozen=True)
class Decision:
    """One choice: who could run, who ran before it (if it could go on), who was chosen."""

    enabled: tuple[str, ...]
    current: str | None  # the actor that ran last, if it can still go on
    chosen: str
    # Whether ``current`` paused just before a write: a pre-emption here lets the other
    # actor act between what ``current`` read and what it writes.
    before_write: bool = False

    @property
    def preempts(self) -> bool:
        return self.current is not None and self.chosen != self.current


class Hand:
    """One actor's thread. ``work`` runs when the scheduler first chooses it."""

    def __init__(self, turns: Turns, name: str, work: Callable[[], object]):
        self.turns, self.name, self.work = turns, name, work
        self.done = False
        self.result: object = None
        self.error: BaseException | None = None
        self.points: list[str] = []  # the yield points it passed, in order
        self.pending_write = False  # whether the call it paused before is a write
        self.thread = threading.Thread(target=self._main, name=f"hand-{name}", daemon=True)

    def _main(self) -> None:
        self.turns.wait_turn(self)
        try:
            self.result = self.work()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller, never lost
            self.error = exc
        finally:
            self.turns.finish(self)


class Turns:
    """The one lock: exactly one hand runs at a time; the rest wait for their turn."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running: Hand | None = None
        self.by_thread: dict[int, Hand] = {}

    def current_hand(self) -> Hand | None:
        return self.by_thread.get(threading.get_ident())

    def wait_turn(self, hand: Hand) -> None:
        with self.cond:
            self.by_thread[threading.get_ident()] = hand
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.running is hand)

    def yield_point(self, label: str, *, write: bool = False) -> None:
        """Called by the running hand before a DynamoDB call: the scheduler chooses."""
        hand = self.current_hand()
        if hand is None:
            return  # not an actor (the prelude, the checks at rest): never paused
        hand.points.append(label)
        hand.pending_write = write
        with self.cond:
            self.running = None
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.running is hand)

    def finish(self, hand: Hand) -> None:
        with self.cond:
            hand.done = True
            self.by_thread.pop(threading.get_ident(), None)
            self.running = None
            self.cond.notify_all()

    def give(self, hand: Hand) -> None:
        """Give ``hand`` the turn and wait until it yields or ends."""
        with self.cond:
            self.running = hand
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.running is None, timeout=TURN_TIMEOUT_S):
                raise ScheduleStuck(f"{hand.name} kept its turn for {TURN_TIMEOUT_S:.0f} s")


def run_schedule(
    turns: Turns, hands: Sequence[Hand], prefix: Sequence[str]
) -> tuple[list[Decision], bool]:
    """Run ``hands`` to their end, choosing by ``prefix`` first and then by default (the
    actor that ran goes on; when it ended, the first one still running). Returns the
    decisions and whether the prefix could be followed."""
    with turns.cond:
        for hand in hands:
            hand.thread.start()
        # Every hand waits for its first turn before anything is chosen.
        ready = turns.cond.wait_for(
            lambda: all(h.thread.ident in turns.by_thread for h in hands), timeout=TURN_TIMEOUT_S
        )
        if not ready:
            raise ScheduleStuck("the actors did not start")
    decisions: list[Decision] = []
    followed, current = True, None
    while enabled := [h for h in hands if not h.done]:
        names = tuple(h.name for h in enabled)
        going_on = current.name if current is not None and not current.done else None
        step = len(decisions)
        if step < len(prefix) and prefix[step] in names:
            chosen = prefix[step]
        else:
            followed = followed and step >= len(prefix)
            chosen = going_on or names[0]
        before_write = current is not None and going_on is not None and current.pending_write
        decisions.append(Decision(names, going_on, chosen, before_write))
        current = next(h for h in enabled if h.name == chosen)
        turns.give(current)
    for hand in hands:
        hand.thread.join(timeout=TURN_TIMEOUT_S)
    return decisions, followed


def preemptions(decisions: Sequence[Decision]) -> int:
    return sum(d.preempts for d in decisions)


def children(
    decisions: Sequence[Decision], prefix_length: int, bound: int = BOUND
) -> list[tuple[int, tuple[str, ...]]]:
    """The schedules that differ from this one at one choice after its prefix, within
    ``bound`` pre-emptions: ``(pre-emptions, prefix)`` each."""
    return [(c.cost, c.prefix) for c in marked_children(decisions, prefix_length, bound)]


@dataclass(frozen=True)
class Child:
    """A schedule to run: its pre-emptions, its prefix of choices, and whether its last
    choice pre-empts an actor inside a read–write window (see :func:`marked_children`)."""

    cost: int
    prefix: tuple[str, ...]
    in_window: bool = False


def marked_children(
    decisions: Sequence[Decision], prefix_length: int, bound: int = BOUND
) -> list[Child]:
    """:func:`children`, each marked whether it pre-empts an actor paused just before a
    write, or just before the one call (a read) that comes before its next write: the
    other actor then acts between what the pre-empted one read and what it writes, where
    lost updates live. The parent schedule shows the actor's next call: the decision after
    it was let go on."""
    out = []
    chosen = [d.chosen for d in decisions]
    for i in range(prefix_length, len(decisions)):
        before = preemptions(decisions[:i])
        decision = decisions[i]
        following = decisions[i + 1] if i + 1 < len(decisions) else None
        window = decision.before_write or (
            following is not None
            and decision.current is not None
            and following.current == decision.current
            and following.before_write
        )
        for alternative in decision.enabled:
            if alternative == decision.chosen:
                continue
            switch = decision.current is not None and alternative != decision.current
            cost = before + int(switch)
            if cost <= bound:
                out.append(Child(cost, (*chosen[:i], alternative), switch and window))
    return out


def level_quotas(count: int, bound: int = BOUND) -> list[int]:
    """How ``count`` schedules of one pair are shared between pre-emption counts 0 to
    ``bound``: the two serial schedules first (there are exactly two with two actors),
    then the rest evenly over 1 to ``bound``, the lower levels taking any remainder."""
    serial = min(2, count)
    rest, levels = count - serial, max(bound, 0)
    if not levels:
        return [serial]
    share, extra = divmod(rest, levels)
    return [serial, *(share + (1 if k < extra else 0) for k in range(levels))]


def sample_level(candidates: Sequence[Child], rng: random.Random) -> list[Child]:
    """One level's candidates in a seeded order: those that pre-empt inside a read–write
    window first, then the rest, each group shuffled. Deterministic given ``rng``'s seed
    and the candidates."""
    unique = sorted(set(candidates), key=lambda c: (c.prefix, c.cost, c.in_window))
    windows = [c for c in unique if c.in_window]
    others = [c for c in unique if not c.in_window]
    rng.shuffle(windows)
    rng.shuffle(others)
    return windows + others


@dataclass(order=True)
class _Queued:
    cost: int
    order: int
    prefix: tuple[str, ...] = field(compare=False)


class Frontier:
    """Schedules still to run, fewest pre-emptions first, then in depth-first order."""

    def __init__(self) -> None:
        self._heap: list[_Queued] = []
        self._order = 0

    def push(self, cost: int, prefix: tuple[str, ...]) -> None:
        # Depth-first within a round: later-found children run first (negative order).
        self._order -= 1
        heapq.heappush(self._heap, _Queued(cost, self._order, prefix))

    def __bool__(self) -> bool:
        return bool(self._heap)

    def pop(self) -> tuple[int, tuple[str, ...]]:
        item = heapq.heappop(self._heap)
        return item.cost, item.prefix

    def drain(self) -> Iterator[tuple[int, tuple[str, ...]]]:
        while self._heap:
            yield self.pop()
