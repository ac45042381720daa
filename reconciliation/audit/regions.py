"""Which region's audit table holds a stream, for readers that span every region
(docs/design.md §2, docs/regions.md).

An audit stream lives in one region: a ``CASE#`` stream where its case id says, a
``PLEDGE#`` stream where its name says, every other stream (staff, tenants, exports,
``SYSTEM``) in the first region. Global Tables copy every event into every region's table
and index, so a reader that fans out over the regions keeps from each region only the
streams that region owns: each event once, whether or not replication has run.

The regions are the stores the edge resolved (``every_store()``), first region first; a
stream whose tag names none of them belongs to the first, as ``stream_store`` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from reconciliation.stores import Store, pledge_stream, stream_tag


def owner_tag(stream: str, tags: Sequence[str]) -> str:
    """The tag of the region among ``tags`` (first region first) that owns ``stream``."""
    tag = stream_tag(stream)
    return tag if tag in tags else tags[0]


def stream_home(stream: str, stores: Sequence[Store]) -> Store:
    """The store among ``stores`` whose region owns ``stream``."""
    tag = owner_tag(stream, [s.tag for s in stores])
    return next(s for s in stores if s.tag == tag)


def owned_by(store: Store, stores: Sequence[Store]) -> Callable[[str], bool]:
    """Whether a stream read from ``store`` is that region's own (not a replica)."""
    tags = [s.tag for s in stores]
    return lambda stream: owner_tag(stream, tags) == store.tag


def by_home(streams: Iterable[str], stores: Sequence[Store]) -> list[tuple[Store, list[str]]]:
    """``streams`` grouped by the store that owns them, in the order of ``stores``."""
    groups: dict[int, list[str]] = {}
    tags = [s.tag for s in stores]
    for stream in streams:
        groups.setdefault(tags.index(owner_tag(stream, tags)), []).append(stream)
    return [(stores[n], sorted(names)) for n, names in sorted(groups.items())]


def case_pledge_stream(case_stream: str, intent_id: str) -> str:
    """The pledge stream a case event's ``intent_id`` names: the pledge is written in the
    region of its key's home, where the case about it lives too."""
    return pledge_stream(intent_id, stream_tag(case_stream))


def pledge_item_stream(pledge: dict[str, Any]) -> str:
    """The audit stream of a pledge item: written in the region its ledger shard names
    (``GENERAL#USD@eu-west-1#3``; the first region's shards name none)."""
    shard_base = str(pledge.get("ledger_key") or "").rpartition("#")[0]
    return pledge_stream(pledge["intent_id"], shard_base.partition("@")[2])
