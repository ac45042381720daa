"""Chain checks of audit streams: each stream's hash chain (no gap in ``seq``, every
hash recomputed, every ``prev_hash`` linked), and a subject stream against the head its
case or pledge item stores (``audit_seq``, ``audit_head``) — the case page's status, the
search page's, and verification's.

With several regions each stream, and the item that stores its head, is read in the
region that owns it (:mod:`.regions`): a replica elsewhere may lag behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from reconciliation.audit.regions import by_home, stream_home
from reconciliation.audit.repository import GENESIS_HASH, AuditRepository, event_hash
from reconciliation.dynamo.batch import stored_heads
from reconciliation.dynamo.calls import TalliedPool
from reconciliation.stores import PLEDGE_STREAM, Store, pledge_stream_parts

# --- chain status ----------------------------------------------------------------------


@dataclass(frozen=True)
class ChainStatus:
    stream: str
    ok: bool
    events: int
    seq: int | None = None  # first broken link
    problem: str = ""
    expected: str = ""
    stored: str = ""
    # The chain links, but it disagrees with the head its subject item stores (the
    # newest events deleted, the stream rewritten, or the item gone): ``problem`` says
    # how, ``detail`` gives the hashes.
    head: bool = False
    detail: str = ""

    def line(self) -> str:
        if self.head:
            return f"{self.stream}: {self.problem}" + (f" ({self.detail})" if self.detail else "")
        text = f"{self.stream} seq {self.seq}: {self.problem}"
        if self.expected or self.stored:
            text += f": expected {self.expected or '-'} stored {self.stored or '-'}"
        return text


def chain_check(stream: str, events: list[dict[str, Any]]) -> ChainStatus:
    """The first broken link of ``stream`` given its stored events in ``seq`` order:
    a gap in ``seq``, a stored hash that is not the hash of the event, or a
    ``prev_hash`` that is not its predecessor's hash."""
    expected_seq, previous = 1, GENESIS_HASH
    # The stream's chain, broken: where (``seq``) and how.
    broken = partial(ChainStatus, stream, False, len(events))
    for event in events:
        seq = int(event.get("seq", 0))
        if seq != expected_seq:
            return broken(
                seq=expected_seq, problem=f"gap: seq {expected_seq} missing (next stored seq {seq})"
            )
        recomputed = event_hash(event)
        if recomputed != event.get("hash"):
            return broken(
                seq=seq,
                problem="hash mismatch",
                expected=recomputed,
                stored=str(event.get("hash", "")),
            )
        if event.get("prev_hash") != previous:
            return broken(
                seq=seq,
                problem="prev_hash does not link to the previous event",
                expected=previous,
                stored=str(event.get("prev_hash", "")),
            )
        previous = event["hash"]
        expected_seq += 1
    return ChainStatus(stream, True, len(events))


def stream_chain_status(stream: str, *, store: Store) -> ChainStatus:
    """Chain status of one stream, e.g. ``CASE#{case_id}`` for the case page."""
    events = AuditRepository(store).stream_events(stream)
    if not events:
        return ChainStatus(stream, False, 0, problem="no events")
    return chain_check(stream, events)


# --- stored heads (subject items) -----------------------------------------------------


class SubjectKind(StrEnum):
    """The item a stream's head is stored on; its value is the noun messages use."""

    CASE = "case"
    PLEDGE = "pledge"


# Stream prefixes of subject items; a pledge stream of another region than the first is
# ``PLEDGE#@<region>#<intent>`` and matches too (``pledge_stream_parts``).
SUBJECT_KINDS = {"CASE#": SubjectKind.CASE, PLEDGE_STREAM: SubjectKind.PLEDGE}


@dataclass(frozen=True)
class SubjectHead:
    """The head a subject item stores beside its state, written in the same transaction
    as each of its events: ``audit_seq`` and ``audit_head``."""

    kind: SubjectKind
    seq: int
    hash: str


def subject_of(stream: str) -> tuple[SubjectKind, str] | None:
    """``("case", case_id)`` or ``("pledge", intent_id)``; ``None`` for streams without a
    subject item (``SYSTEM``, ``EXPORT#…``, ``STAFF#…``). A pledge stream of any region
    names its intent."""
    for prefix, kind in SUBJECT_KINDS.items():
        if stream.startswith(prefix):
            if kind == SubjectKind.PLEDGE:
                return kind, pledge_stream_parts(stream)[0]
            return kind, stream.removeprefix(prefix)
    return None


def subject_heads(
    streams: set[str] | list[str],
    *,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
) -> dict[str, SubjectHead]:
    """The stored head of each subject stream whose item exists, keyed by stream: one
    BatchGetItem a hundred items per table, two attributes each, consistent reads. With
    ``stores`` (every region) each item is read in the region that owns its stream."""
    sources = list(stores) if stores else [store] if store else []
    heads: dict[str, SubjectHead] = {}
    for home, names in by_home(streams, sources):
        wanted: dict[SubjectKind, dict[str, str]] = {SubjectKind.CASE: {}, SubjectKind.PLEDGE: {}}
        for stream in names:
            subject = subject_of(stream)
            if subject:
                wanted[subject[0]][subject[1]] = stream
        for kind, table, key_name in (
            (SubjectKind.CASE, home.tables.cases, "case_id"),
            (SubjectKind.PLEDGE, home.tables.pledges, "intent_id"),
        ):
            if not wanted[kind]:
                continue
            found = stored_heads(home.client, table, key_name, list(wanted[kind]))
            for key, (seq, digest) in found.items():
                heads[wanted[kind][key]] = SubjectHead(kind, seq, digest)
    return heads


def subject_chain_status(
    stream: str,
    events: list[dict[str, Any]],
    head: SubjectHead | None,
    *,
    reread: Callable[[], SubjectHead | None] | None = None,
) -> ChainStatus:
    """:func:`chain_check`, then the stream against the head its subject item stores.

    Read the item *before* the stream: an event and its item's new head are written in
    one transaction, so the item read first can only be behind the stream read after
    it, never ahead. A stream that ends before the stored head lost its newest events;
    one that runs past it raced a live change, so the item is read again (``reread``)
    and only a stream still past it is reported.
    """
    status = chain_check(stream, events)
    subject = subject_of(stream)
    if not status.ok or subject is None:
        return status
    noun = subject[0]
    if head is None:
        if not events:
            return status
        return ChainStatus(
            stream,
            False,
            len(events),
            problem=f"{len(events)} events but no {noun} item to store the stream's head",
            head=True,
        )
    last = int(events[-1]["seq"]) if events else 0
    if last > head.seq and reread is not None:
        head = reread() or head
    by_seq = {int(e["seq"]): e for e in events}
    at_head = by_seq.get(head.seq)
    if not events and head.seq == 0:
        return status  # an item that never had an event (none is written that way)
    if not events:
        problem = f"the {noun} item stores audit_seq {head.seq} but the stream has no events"
        detail = f"audit_head {head.hash or '-'}"
    elif last < head.seq:
        problem = f"the {noun} item stores audit_seq {head.seq} but the stream ends at seq {last}"
        detail = f"audit_head {head.hash or '-'}, stream's last hash {events[-1].get('hash')}"
    elif at_head is None or at_head.get("hash") != head.hash:
        problem = f"the {noun} item's audit_head is not the hash of seq {head.seq}"
        stored = at_head.get("hash") if at_head else "-"
        detail = f"audit_head {head.hash or '-'}, stream's seq {head.seq} hash {stored}"
    elif last > head.seq:
        problem = f"the stream runs to seq {last}, past the {noun} item's audit_seq {head.seq}"
        detail = f"audit_head {head.hash or '-'}"
    else:
        return status
    return ChainStatus(
        stream, False, len(events), seq=head.seq, problem=problem, head=True, detail=detail
    )


def case_chain_status(
    case_id: str,
    events: list[dict[str, Any]],
    head: SubjectHead,
    *,
    store: Store,
) -> ChainStatus:
    """The case page's status: its timeline against the head its item stores (read
    before the timeline; read again only if the timeline runs past it)."""
    stream = f"CASE#{case_id}"

    def reread() -> SubjectHead | None:
        return subject_heads([stream], store=store).get(stream)

    return subject_chain_status(stream, events, head, reread=reread)


def chain_statuses(
    streams: set[str] | list[str],
    *,
    store: Store | None = None,
    stores: Sequence[Store] | None = None,
    threads: int = 8,
) -> dict[str, ChainStatus]:
    """Chain status of each stream, read in parallel (each is one Query, or a few), in
    the region among ``stores`` that owns it (or in ``store``)."""
    ordered = sorted(streams)
    if not ordered:
        return {}
    sources = list(stores) if stores else [store] if store else []

    def check(stream: str) -> ChainStatus:
        return stream_chain_status(stream, store=stream_home(stream, sources))

    if len(ordered) == 1:
        return {ordered[0]: check(ordered[0])}
    with TalliedPool(min(threads, len(ordered))) as pool:
        return dict(zip(ordered, pool.map(check, ordered), strict=True))
