"""Which scenarios run and where: depth 1 and the pruned pairs of depth 2, in this process
or over spawned workers, and :func:`explore`, which runs them all.
"""

from __future__ import annotations

import fnmatch
import itertools
import multiprocessing
import os
import queue
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from reconciliation.simulation.explorer.report import result_lines
from reconciliation.simulation.explorer.session import Result, Session, explorer_engine, run_guarded
from reconciliation.simulation.explorer.vocabulary import (
    EXHAUSTING,
    FAULT_FREE,
    FAULT_KINDS,
    THROTTLES,
    WRITE_ONLY,
    Fault,
    Point,
    scenario_id,
    scenario_parse,
)
from reconciliation.simulation.explorer.wire import CallRecord

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

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


# Depth 1 also faults the writes of the system's other hands: the sweep's case opening,
# the re-check's and a person's case changes, the retry's re-claim, commit and result. A
# fault-free life never reaches them (its first request records the pledge), so each is
# reached from a premise: a commit refused outright (the claim stays PENDING: the sweep
# opens STUCK_PENDING, a person asks for RETRY_COMMIT, the retry task commits and
# resolves), and a commit applied whose answer was lost (an AMBIGUOUS_TIMEOUT case that
# the re-check resolves). Every kind that acts on a write is tried at each of them.
PREMISES = ("POST#1 commit#1:validation", "POST#1 commit#1:timeout_after")
PREMISE_KINDS = (
    "timeout_after",
    "http500_after",
    "throttle_exhausted",
    "lost_then_throttle",
    "conflict",
    "crash_after",
)


def premise_faults(result: Result) -> list[str]:
    """A fault at every write of the later episodes of a premise's life."""
    if result.scenario not in PREMISES:
        return []
    (first,) = result.plan
    out = []
    for sid in second_faults(result, later_writes=True):
        second = scenario_parse(sid)[1]
        if second.point.episode != first.point.episode and second.kind in PREMISE_KINDS:
            out.append(sid)
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

    def __init__(self, setup: dict[str, Any]):
        self.session = Session(**setup)

    def __enter__(self) -> LocalRunner:
        self.session.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.session.__exit__(*exc_info)

    def map(self, ids: list[str], progress: Progress) -> list[Result]:
        progress.add(len(ids))
        results = []
        for sid in ids:
            results.append(run_guarded(self.session, sid))
            progress.done(results[-1])
        return results


def _worker_main(
    tasks: Queue[tuple[int, str] | None],
    results: Queue[tuple[int, Result]],
    setup: dict[str, Any],
    settings_module: str,
) -> None:
    """A spawned worker: Django with a private in-memory database (its API token never
    lands in the configured one), its own tables, then scenarios until told to stop."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ["DATABASE_URL"] = "sqlite://:memory:"
    # Django is loaded only once this worker's settings module and database are set.
    import django  # noqa: PLC0415 - after the worker's environment is set
    from django.core.management import call_command  # noqa: PLC0415 - as django above

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    with Session(**setup) as session:
        while (item := tasks.get()) is not None:
            index, sid = item
            results.put((index, run_guarded(session, sid)))


class ProcessRunner:
    """Scenarios spread over N spawned worker processes (one table set each)."""

    def __init__(self, setup: dict[str, Any], workers: int):
        context = multiprocessing.get_context("spawn")
        self.tasks: Queue[tuple[int, str] | None] = context.Queue()
        self.results: Queue[tuple[int, Result]] = context.Queue()
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

    def __exit__(self, *exc_info: object) -> None:
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


def explore(config: ExploreConfig, progress: Progress | None = None) -> Exploration:
    started = time.monotonic()
    progress = progress or Progress()
    endpoint = config.endpoint_url or settings.DYNAMODB_ENDPOINT_URL
    with explorer_engine(endpoint) as url:
        setup = {"endpoint_url": url, "prefix": f"xf{uuid.uuid4().hex[:8]}-", "seed": config.seed}
        runner = ProcessRunner(setup, config.workers) if config.workers else LocalRunner(setup)
        with runner:
            results = _scenarios(config, runner, progress)
    return Exploration(config, results, time.monotonic() - started)


def _scenarios(
    config: ExploreConfig, runner: LocalRunner | ProcessRunner, progress: Progress
) -> list[Result]:
    exact = exact_plan(config.only)
    if exact is not None:
        return runner.map([scenario_id(exact)], progress)
    baseline = runner.map([FAULT_FREE], progress)[0]
    firsts = depth_one(baseline)
    wanted = [sid for sid in firsts if matches(sid, config.only)]
    # Depth 2 needs every first fault's own life to know where a second can go.
    level_one = runner.map(firsts if config.depth == 2 else wanted, progress)
    results = [r for r in (baseline, *level_one) if matches(r.scenario, config.only)]
    if config.depth == 1:
        premised = [
            sid
            for result in level_one
            for sid in premise_faults(result)
            if matches(sid, config.only)
        ]
        results += runner.map(premised, progress)
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
        out = result_lines(self.results)
        workers = self.config.workers or "in-process"
        later = " + later writes" if self.config.later_writes and self.config.depth == 2 else ""
        out.append(f"depth {self.config.depth}{later}, {self.seconds:.0f} s, workers: {workers}")
        out.append(self.summary())
        return out
