"""Where a key's items live: one region's DynamoDB client and table names (docs/design.md §2).

The edge — a view, a task, a command — resolves a :class:`Store` once and passes it down
as ``store=``; each package builds its repository on it (``ClaimRepository(store)``), so
nothing below the edge picks a region, and this module needs nothing of ours but
``dynamo``. Which store (docs/regions.md):

- anything about one idempotency key (claim, pledge, ledger shard, its cases and
  streams): the key's home region, ``home_store(key)``;
- a case, by its id: the region its id names, ``case_store(case_id)``;
- an audit stream: the region its name names, ``stream_store(stream)``;
- region-wide records (staff, tenants, exports, checkpoints, the ``SYSTEM`` stream): the
  primary region (``DDB_PRIMARY_REGION``, first of ``regions()``), ``first_store()``;
- listings and totals: every region, ``every_store()``, merged by the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reconciliation.dynamo.client import (
    Patience,
    Region,
    TableNames,
    home_region,
    region_tagged,
    regions,
    shared_client,
    table_names,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from reconciliation.dynamo.client_hooks import CodeFaults

# The tag separators in keys that belong to one region (docs/design.md §3): a case id
# ``C-…-<region>``, a pledge stream ``PLEDGE#@<region>#<intent>``.
CASE_TAG_SEP = "-"
PLEDGE_STREAM = "PLEDGE#"


@dataclass(frozen=True)
class Store:
    """One region's tables on one client: a shared one, or one built for injecting faults.

    ``faults``: the scope of the faults raised in our own code rather than on the wire
    (the worker dying between claim and commit), the same one the client's fault hooks
    consult; ``None`` in production, where nothing of fault injection runs."""

    client: DynamoDBClient
    tables: TableNames
    region: Region | None = field(default=None, compare=False)
    faults: CodeFaults | None = field(default=None, compare=False)

    @property
    def tag(self) -> str:
        """How keys that belong to this region name it (``""`` for the primary region)."""
        return self.region.tag if self.region else ""

    @property
    def region_name(self) -> str:
        return self.region.name if self.region else regions()[0].name

    def roles(self) -> dict[str, str]:
        """Table role → physical name, for decoding cancellation reasons."""
        return {
            "idempotency_keys": self.tables.idempotency_keys,
            "pledges": self.tables.pledges,
            "ledger": self.tables.ledger,
            "cases": self.tables.cases,
            "audit_events": self.tables.audit_events,
            "requests": self.tables.requests,
        }


def region_store(region: Region, *, wait: Patience | None = None) -> Store:
    shared = shared_client(region, wait=wait)
    return Store(shared.client, table_names(), region, faults=shared.faults)


def first_store(client: DynamoDBClient | None = None, *, wait: Patience | None = None) -> Store:
    """The primary region's tables, first of ``regions()`` (on ``client`` if given, else on
    a client with ``wait``'s patience, default the request path's; a batch command passes
    ``dynamo.client.batch_patience()``): where region-wide records live."""
    first = regions()[0]
    if client is not None:
        return Store(client, table_names(), first)
    shared = shared_client(first, wait=wait)
    return Store(shared.client, table_names(), first, faults=shared.faults)


def home_store(key: str) -> Store:
    """``key``'s home region: every read and write of one idempotency key goes there
    (``DDB_REGIONS``)."""
    return region_store(home_region(key))


def tagged_store(tag: str, *, wait: Patience | None = None) -> Store | None:
    """The region whose keys carry ``tag``, or ``None`` when no configured region does."""
    region = region_tagged(tag)
    return region_store(region, wait=wait) if region else None


def every_store(*, wait: Patience | None = None) -> list[Store]:
    """Every configured region's tables, the primary region first (listings, totals and
    region-wide sweeps)."""
    return [region_store(region, wait=wait) for region in regions()]


# --- keys that name their region ------------------------------------------------------


def tagged_case_id(case_id: str, tag: str) -> str:
    """A case id that names the region the case lives in (the primary region's ids do not)."""
    return f"{case_id}{CASE_TAG_SEP}{tag}" if tag else case_id


def case_tag(case_id: str) -> str:
    """The region tag a case id names (``C-`` and 16 characters, then ``-<region>``)."""
    return case_id[19:] if len(case_id) > 19 and case_id[18] == CASE_TAG_SEP else ""


def case_store(case_id: str, *, wait: Patience | None = None) -> Store:
    """The region a case lives in, by its id. An id naming no configured region reads the
    primary region, where it is simply not found."""
    return tagged_store(case_tag(case_id), wait=wait) or first_store(wait=wait)


def pledge_stream(intent_id: str, tag: str = "") -> str:
    """The audit stream of a pledge written in the region tagged ``tag``. Named for its
    region, so the same intent recorded in two regions (never, while keys are pinned)
    leaves two streams that replication cannot merge into one."""
    return f"{PLEDGE_STREAM}@{tag}#{intent_id}" if tag else f"{PLEDGE_STREAM}{intent_id}"


def pledge_stream_parts(stream: str) -> tuple[str, str]:
    """``(intent_id, tag)`` of a pledge stream name."""
    rest = stream.removeprefix(PLEDGE_STREAM)
    if rest.startswith("@"):
        tag, _, intent = rest[1:].partition("#")
        return intent, tag
    return rest, ""


def stream_tag(stream: str) -> str:
    """The region tag of an audit stream: a case's names its case's region, a pledge's
    its own; every other stream (staff, tenants, exports, ``SYSTEM``) is the primary
    region's."""
    if stream.startswith("CASE#"):
        return case_tag(stream.removeprefix("CASE#"))
    if stream.startswith(PLEDGE_STREAM):
        return pledge_stream_parts(stream)[1]
    return ""


def stream_store(stream: str, *, wait: Patience | None = None) -> Store:
    """The region an audit stream is appended in."""
    return tagged_store(stream_tag(stream), wait=wait) or first_store(wait=wait)
