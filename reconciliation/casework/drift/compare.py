"""The comparison of one run: what each change adds to the pledge side, the totals each
side should hold (per region, the ledger its receipts and voids say; overall, the
RECORDED pledges and the strays' ledger additions), and the differences beyond what is
already reported."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from reconciliation.casework.drift.checkpoint import Checkpoint
from reconciliation.casework.drift.read import Change, Reading
from reconciliation.claims.models import Pledge
from reconciliation.stores import Store

ALL = "*"  # the scope of the overall comparison (ledger of every region against pledges)


def winner(pledge: Pledge) -> str:
    """The region tag the pledge item's ledger key names (its write is the one kept)."""
    fund_part = pledge.ledger_key.rsplit("#", 1)[0]
    return fund_part.partition("@")[2]


@dataclass
class PledgeSide:
    """What the changed intents' pledge items say of the changes read."""

    pledges: dict[str, Pledge | None]  # per intent: its pledge item, if any
    duplicates: dict[str, str] = field(default_factory=dict)  # intent -> latest receipt's at
    missing: set[str] = field(default_factory=set)  # intents with no pledge item
    # What each change adds to the pledge side: its amount if the pledge item kept it.
    delta: dict[Change, Decimal] = field(default_factory=dict)


def pledge_side(changes: list[Change], pledges: dict[str, Pledge | None]) -> PledgeSide:
    """Count a receipt on the pledge side only where the pledge item's ledger key names
    its region; a receipt of another region, or a stray after the intent's one record, is
    a duplicate. ``changes`` end with the strays: an owner's record counts first."""
    side = PledgeSide(pledges)
    counted: set[str] = set()  # intents whose receipt counts on the pledge side
    for change in changes:
        pledge = pledges[change.intent_id]
        if pledge is None:
            side.missing.add(change.intent_id)
            side.delta[change] = Decimal(0)
        elif winner(pledge) != change.region or (
            change.is_stray and change.is_receipt and change.intent_id in counted
        ):
            if change.is_receipt:
                latest = side.duplicates.get(change.intent_id, "")
                side.duplicates[change.intent_id] = max(change.at, latest)
            side.delta[change] = Decimal(0)
        else:
            side.delta[change] = change.amount
            if change.is_receipt:
                counted.add(change.intent_id)
    return side


@dataclass
class Totals:
    """Per ``fund#currency``, what each side should hold now, and (``settled_*``) what of
    it is at or before the watermark: what the next checkpoint keeps."""

    expected: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # per region tag
    pledges: dict[str, Decimal] = field(default_factory=dict)
    strays: dict[str, Decimal] = field(default_factory=dict)
    first_sight: set[str] = field(default_factory=set)
    settled_expected: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    settled_pledges: dict[str, Decimal] = field(default_factory=dict)
    settled_strays: dict[str, Decimal] = field(default_factory=dict)


def _sums(
    changes: Iterable[Change], watermark: str, amount: Callable[[Change], Decimal]
) -> tuple[Decimal, Decimal]:
    """The ``amount`` of ``changes`` in all, and of those at or before ``watermark``."""
    mine = list(changes)
    total = sum((amount(c) for c in mine), Decimal(0))
    settled = sum((amount(c) for c in mine if c.at <= watermark), Decimal(0))
    return total, settled


def _signed(change: Change) -> Decimal:
    return change.amount


def _region_totals(ckpt: Checkpoint, reading: Reading, key: str, totals: Totals) -> Decimal:
    """Each region's expected ledger of ``key``: its checkpoint's plus the changes read
    (first sight: the ledger as read is the baseline). Returns the sum of the baselines."""
    bases = Decimal(0)
    watermark = reading.window.watermark
    for tag, found in reading.changes.items():
        total, settled = _sums((c for c in found if c.key == key), watermark, _signed)
        base = ckpt.expected.get(tag, {}).get(key)
        if base is None:  # first sight: the ledger as read is the baseline
            base = reading.ledgers[tag][key] - total
            totals.first_sight.add(key)
        bases += base
        totals.expected.setdefault(tag, {})[key] = base + total
        totals.settled_expected.setdefault(tag, {})[key] = base + settled
    return bases


def expected_totals(ckpt: Checkpoint, reading: Reading, side: PledgeSide) -> Totals:
    """Both sides' totals of every key read, from the checkpoint's and the changes."""
    totals = Totals()
    watermark = reading.window.watermark
    for key in sorted(reading.keys):
        bases = _region_totals(ckpt, reading, key, totals)
        mine = (c for c in reading.all if c.key == key)
        total, settled = _sums(mine, watermark, lambda c: side.delta[c])
        base_p = ckpt.pledges.get(key, bases)
        totals.pledges[key] = base_p + total
        totals.settled_pledges[key] = base_p + settled
        # Ledger additions under another region's names: no region's own total has them.
        strayed = (c for c in reading.strays if c.key == key)
        total, settled = _sums(strayed, watermark, _signed)
        base_s = ckpt.strays.get(key, Decimal(0))
        totals.strays[key] = base_s + total
        if totals.strays[key] or key in ckpt.strays:
            totals.settled_strays[key] = base_s + settled
    return totals


@dataclass(frozen=True)
class Finding:
    """A difference in one scope (a region tag, or ``ALL``) no open case reports."""

    scope: str
    key: str
    difference: Decimal


def differences(
    ckpt: Checkpoint, reading: Reading, totals: Totals, stores: Sequence[Store]
) -> list[Finding]:
    """Per key, each region's ledger against its expected total, then every region's
    expected ledgers (and the strays') against the pledges; net of what is accepted and
    of what open cases already report."""
    findings: list[Finding] = []
    for key in sorted(reading.keys):
        for store in stores:
            diff = reading.ledgers[store.tag][key] - totals.expected[store.tag][key]
            diff = ckpt.beyond(store.tag, key, diff - ckpt.accepted_for(store.tag, key))
            if diff:
                findings.append(Finding(store.tag, key, diff))
        ledger_side = sum((totals.expected[s.tag][key] for s in stores), totals.strays[key])
        overall = ledger_side - totals.pledges[key]
        overall = ckpt.beyond(ALL, key, overall - ckpt.accepted_for(ALL, key))
        if overall:
            findings.append(Finding(ALL, key, overall))
    return findings
