"""The confirming read: a difference, or a fund seen for the first time, is read again
after ``LEDGER_DRIFT_CONFIRM_MS``; if anything of that fund moved meanwhile, it is left
to the next run, and a baseline taken while it moved is not kept."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings

from reconciliation import clock
from reconciliation.casework.drift.checkpoint import Checkpoint
from reconciliation.casework.drift.read import Reading, ledger_totals, pledge_changes
from reconciliation.stores import Store


@dataclass(frozen=True)
class Confirmation:
    moving: set[str]  # the suspects that moved during the run
    queries: int  # how many Queries the second read of the window took


def moving(suspects: set[str], stores: Sequence[Store], reading: Reading) -> Confirmation:
    """Which of ``suspects`` (funds with a difference, or first seen) moved during the run:
    read after ``LEDGER_DRIFT_CONFIRM_MS``, the window holds a change the first read did
    not, whatever its time stamp (a commit claimed before the run may land after its
    Query: its receipt is back-dated), or the ledger total differs. The window is read
    again, so a suspected difference or a new fund costs a second read of it."""
    time.sleep(int(settings.LEDGER_DRIFT_CONFIRM_MS) / 1000)
    later = clock.iso(clock.now())
    moved: set[str] = set()
    queries = 0
    for store in stores:
        read = pledge_changes(store, reading.window.after, later)
        queries += read.queries
        moved |= {c.key for c in set(read.owned) - set(reading.changes[store.tag])}
        again = ledger_totals(store, suspects)
        moved |= {k for k in suspects if again[k] != reading.ledgers[store.tag][k]}
    return Confirmation(moved & suspects, queries)


def unconfirmed_baselines_drop(
    new: Checkpoint, old: Checkpoint, keys: Iterable[str], tags: Iterable[str]
) -> None:
    """Keep out of ``new`` the first-sight baselines of ``keys`` (read while they moved):
    a later run takes them."""
    tags = list(tags)
    for key in keys:
        if key not in old.pledges:
            new.pledges.pop(key, None)
        for tag in tags:
            if key not in old.expected.get(tag, {}):
                new.expected.get(tag, {}).pop(key, None)
