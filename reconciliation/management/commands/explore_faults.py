"""``manage.py explore_faults [--depth 1|2] [--seed S] [--only PATTERN] [--workers N]``:
every fault kind at every DynamoDB call of one intent's life, then the invariants."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from reconciliation.dynamo.local import LocalEngineError
from reconciliation.management.arguments import seed_number, whole_number
from reconciliation.simulation.explorer import ExploreConfig, Progress, Result, explore
from reconciliation.simulation.explorer.hands_search import HandsConfig, explore_hands


class _Report(Protocol):
    def lines(self) -> Iterable[str]: ...


_Exploration = TypeVar("_Exploration", bound=_Report)


class _Bar(Progress):
    def __init__(self, bar: tqdm):
        self.bar = bar

    def add(self, count: int) -> None:
        self.bar.total = (self.bar.total or 0) + count
        self.bar.refresh()

    def done(self, result: Result) -> None:
        self.bar.update(1)


@dataclass(frozen=True)
class _HandsOption:
    """An option of ``--actors 2`` alone (its help says so)."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    switch: bool = False  # a flag without a value

    def add_to(self, parser: CommandParser) -> None:
        help_text = f"with --actors 2: {self.help}"
        if self.switch:
            parser.add_argument(self.flag, action="store_true", help=help_text)
        elif self.type is None:
            parser.add_argument(self.flag, default=self.default, help=help_text)
        else:
            parser.add_argument(self.flag, type=self.type, default=self.default, help=help_text)


HANDS_OPTIONS = (
    _HandsOption("--bound", "pre-emptions per schedule", whole_number(0, 16), 2),
    _HandsOption(
        "--per-pair",
        "schedules per pair, a seeded share of each pre-emption count and a third with a "
        "fault (0: every one)",
        whole_number(0, 1_000_000),
        0,
    ),
    _HandsOption(
        "--per-pair-acks",
        "schedules per pair of an acknowledgement hand (dispatch, dispatch2, approve-void), "
        "as --per-pair (default: --per-pair)",
        whole_number(0, 1_000_000),
        None,
    ),
    _HandsOption(
        "--max-schedules",
        "schedules over the whole run (0: no cap)",
        whole_number(0, 100_000_000),
        0,
    ),
    _HandsOption("--pairs", "only these pairs, e.g. 'retry,retry2 retry,sweep'", default=""),
    _HandsOption(
        "--hands",
        "only the pairs with one of these hands, e.g. 'dispatch,dispatch2,approve-void'",
        default="",
    ),
    _HandsOption(
        "--sample", "this many pairs, drawn by --seed (0: every pair)", whole_number(0, 100_000), 0
    ),
    _HandsOption(
        "--no-faults", "interleavings only, no fault at the serial schedules' writes", switch=True
    ),
)


class Command(BaseCommand):
    help = (
        "Run one intent's life with every fault kind at every DynamoDB call (depth 1), or "
        "every pair within one request (depth 2), and check the invariants after each. "
        "Last line: 'explore_faults: N scenarios, V violations'; exit status 1 on any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--depth", type=int, choices=(1, 2), default=1)
        parser.add_argument("--seed", type=seed_number, default=0)
        parser.add_argument(
            "--actors",
            type=int,
            choices=(1, 2),
            default=1,
            help="2: two hands of the catalogue on one intent and its case, interleaved at "
            "every DynamoDB call under a pre-emption bound, with one fault at every write of "
            "the serial schedules; last line 'explore_faults: N schedules, V violations'",
        )
        for option in HANDS_OPTIONS:
            option.add_to(parser)
        parser.add_argument(
            "--only",
            default=None,
            help="run only scenarios whose id matches (fnmatch or substring); an exact "
            "scenario id, as printed on a violation's line, is replayed whatever the depth",
        )
        parser.add_argument(
            "--within-request",
            action="store_true",
            help="at depth 2, pair each first fault only with later calls of its own "
            "episode (one request or task run), not with the writes of the life's later "
            "episodes (the client's next requests, the sweeps, the disposition, the retry)",
        )
        parser.add_argument(
            "--workers",
            type=whole_number(0, 16),
            default=1,
            help="worker processes, each with its own tables (0: in this process, which "
            "then needs the API token table in the configured database)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["actors"] == 2:
            return self._hands(options)
        depth, workers = options["depth"], options["workers"]
        config = ExploreConfig(
            depth=depth,
            seed=options["seed"],
            only=options["only"],
            workers=workers,
            later_writes=not options["within_request"],
        )
        exploration = self._explored("scenario", lambda bar: explore(config, _Bar(bar)))
        if exploration.violations:
            # Not CommandError: its message would follow the summary, which must stay last.
            sys.exit(1)

    def _hands(self, options: dict[str, Any]) -> None:
        config = HandsConfig(
            bound=options["bound"],
            per_pair=options["per_pair"],
            per_pair_acks=options["per_pair_acks"],
            max_schedules=options["max_schedules"],
            pairs=tuple(options["pairs"].split()),
            hands=tuple(h for h in options["hands"].replace(",", " ").split()),
            sample=options["sample"],
            faults=not options["no_faults"],
            seed=options["seed"],
        )
        hands = self._explored(
            "schedule",
            lambda bar: explore_hands(config, lambda _pair, found: bar.update(len(found))),
        )
        if hands.violations or hands.extra:
            sys.exit(1)

    def _explored(self, unit: str, run: Callable[[tqdm], _Exploration]) -> _Exploration:
        """Run one exploration with a progress bar (on a terminal, counting ``unit``s);
        one that could not run is a CommandError. Its report goes to stdout."""
        bar = tqdm(unit=unit, disable=not sys.stderr.isatty(), file=sys.stderr)
        try:
            exploration = run(bar)
        except (BotoCoreError, ClientError, LocalEngineError, RuntimeError) as exc:
            raise CommandError(f"the exploration could not run: {exc}") from exc
        finally:
            bar.close()
        for line in exploration.lines():
            self.stdout.write(line)
        return exploration
