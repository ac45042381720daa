"""The one factory for DynamoDB clients (the client is injected; this is the default).

Clients are configured explicitly (docs/design.md §4): standard retry mode, a bounded
``total_max_attempts`` and connect/read timeouts, so a request path gives up within a
few seconds instead of botocore's legacy 10 attempts and ~25 s of backoff.

The shared clients (:func:`dynamodb_client`), which serve the API, the pages and the
tasks, carry no fault hook in production: fault injection attaches to them only through
:mod:`reconciliation.dynamo.client_hooks`, where the simulation app registers a hook in a
process that allows it. The drill and the simulator build clients of their own on
:func:`build_client` and hook those (``reconciliation.simulation.fault_hooks``).
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from reconciliation import metrics
from reconciliation.dynamo import attempts, calls, failed_writes
from reconciliation.dynamo.client_hooks import shared_client_hooks_run

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from reconciliation.dynamo.client_hooks import CodeFaults

_shared: dict[tuple[object, ...], SharedClient] = {}
_lock = threading.Lock()
# One boto3 session for every client this process builds: a new session parses the
# service model and endpoint data again (~150-250 ms of CPU per client; a shared one
# builds a client in ~15 ms). A session is not thread-safe, so clients are built from it
# under ``_session_lock`` only; each client still gets its own event hooks.
_session: boto3.session.Session | None = None
_session_lock = threading.Lock()


# A region name as AWS spells them ("eu-west-1"); it becomes part of keys (``tag``).
REGION_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,31}")


@dataclass(frozen=True)
class Region:
    """One region's engine. ``tag`` names the region inside keys that belong to one
    region (ledger shards, queue counters, case ids, pledge streams: docs/design.md §3): empty
    for the primary region (``DDB_PRIMARY_REGION``), so a single-region table keeps the
    keys it had. Derived from the region's name, never from its place in a list: every
    process must agree on it (docs/regions.md, "One configuration")."""

    name: str
    endpoint_url: str | None
    tag: str = ""


@dataclass(frozen=True)
class TableNames:
    idempotency_keys: str
    pledges: str
    ledger: str
    cases: str
    audit_events: str
    requests: str

    @classmethod
    def from_prefix(cls, prefix: str) -> TableNames:
        return cls(
            idempotency_keys=f"{prefix}idempotency_keys",
            pledges=f"{prefix}pledges",
            ledger=f"{prefix}ledger",
            cases=f"{prefix}cases",
            audit_events=f"{prefix}audit_events",
            requests=f"{prefix}requests",
        )

    def all(self) -> list[str]:
        return [
            self.idempotency_keys,
            self.pledges,
            self.ledger,
            self.cases,
            self.audit_events,
            self.requests,
        ]


def table_names() -> TableNames:
    return TableNames.from_prefix(settings.DDB_TABLE_PREFIX)


def _listed() -> list[tuple[str, str | None]]:
    """``(name, endpoint)`` of every region ``DDB_REGIONS`` names, as listed."""
    raw = (settings.DDB_REGIONS or "").strip()
    if not raw:
        return [(settings.AWS_REGION, settings.DYNAMODB_ENDPOINT_URL)]
    out: list[tuple[str, str | None]] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, url = part.partition("=")
        name = name.strip()
        if not REGION_NAME_RE.fullmatch(name) or any(n == name for n, _ in out):
            raise ImproperlyConfigured(
                f"DDB_REGIONS: {name!r} is not a region name (lower-case letters, digits "
                "and '-', each region once)"
            )
        out.append((name, url.strip() or settings.DYNAMODB_ENDPOINT_URL))
    return out


def regions() -> list[Region]:
    """The configured regions (``DDB_REGIONS`` if set, else the single default one): the
    primary region first, then the others by name. The order of ``DDB_REGIONS`` decides
    nothing: two processes listing the same regions in another order build the same
    list, so they agree on every key's home and every region's tag."""
    listed = _listed()
    primary = settings.DDB_PRIMARY_REGION or min(name for name, _ in listed)
    if primary not in {name for name, _ in listed}:
        raise ImproperlyConfigured(
            f"DDB_PRIMARY_REGION: {primary!r} is not one of DDB_REGIONS "
            f"({', '.join(sorted(name for name, _ in listed))})"
        )
    ordered = sorted(listed, key=lambda pair: (pair[0] != primary, pair[0]))
    return [Region(name, url, tag="" if name == primary else name) for name, url in ordered]


def primary_region() -> Region:
    """The untagged region, where region-wide records live (staff, tenants, ``SYSTEM``)."""
    return regions()[0]


def region_tagged(tag: str) -> Region | None:
    """The configured region whose keys carry ``tag`` (``""``: the primary), or ``None``."""
    return next((r for r in regions() if r.tag == tag), None)


def local_region() -> Region:
    """The region this process runs in: the one ``AWS_REGION`` names when it is among
    ``DDB_REGIONS`` (AWS sets it to where the compute runs), else the primary."""
    all_regions = regions()
    return next((r for r in all_regions if r.name == settings.AWS_REGION), all_regions[0])


def unpinned() -> bool:
    """The test-only switch ``DDB_UNPINNED=1``: every key is read and written in the
    local region instead of its home region, the routing the seed warns about. Honoured
    only where fault injection is (``DJANGO_DEBUG=1`` or ``ALLOW_FAULT_INJECTION=1``)."""
    return bool(settings.DDB_UNPINNED and settings.ALLOW_FAULT_INJECTION)


def _weight(region_name: str, key: str) -> int:
    digest = hashlib.sha256(f"{region_name}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def home_region(key: str) -> Region:
    """The region that owns ``key``, so every read and write of one idempotency key goes
    to one replica (Global Tables resolve concurrent writes to different replicas by
    last-writer-wins, which would break put-if-absent).

    Rendezvous (highest-random-weight) hashing over region *names*: the region whose
    ``sha256(name, key)`` is highest. The order of ``DDB_REGIONS`` plays no part, and a
    region added later takes only the keys it now wins; no key moves between the regions
    that were there (a modulo over list positions would re-home most keys)."""
    all_regions = regions()
    if len(all_regions) == 1:
        return all_regions[0]
    if unpinned():
        return local_region()
    return max(all_regions, key=lambda r: (_weight(r.name, key), r.name))


@dataclass(frozen=True)
class Patience:
    """How long a client waits for an answer and how often it tries."""

    read_timeout_s: float
    max_attempts: int


def request_patience() -> Patience:
    """The request path's patience: every client unless told otherwise."""
    return Patience(settings.DDB_READ_TIMEOUT_S, settings.DDB_MAX_ATTEMPTS)


def batch_patience() -> Patience:
    """Command-line batch work's patience (exports, verification): patient reads and more
    attempts, never less than the request path's."""
    request = request_patience()
    return Patience(
        max(request.read_timeout_s, settings.DDB_BATCH_READ_TIMEOUT_S),
        max(request.max_attempts, settings.DDB_BATCH_MAX_ATTEMPTS),
    )


def client_config(wait: Patience | None = None) -> Config:
    wait = wait or request_patience()
    return Config(
        retries={"mode": "standard", "total_max_attempts": wait.max_attempts},
        connect_timeout=settings.DDB_CONNECT_TIMEOUT_S,
        read_timeout=wait.read_timeout_s,
        max_pool_connections=64,
        # Every request is built by code and DynamoDB validates it again server-side;
        # client-side validation costs ~1 ms of CPU per transaction on the request path.
        parameter_validation=False,
    )


def build_client(region: Region, wait: Patience | None = None) -> DynamoDBClient:
    """A new client for ``region``, instrumented, with no fault hook."""
    global _session
    kwargs: dict[str, Any] = {"region_name": region.name, "config": client_config(wait)}
    with _session_lock:
        session = _session = _session or boto3.session.Session()
        if region.endpoint_url:
            kwargs["endpoint_url"] = region.endpoint_url
            if session.get_credentials() is None:
                # Local engines accept any credentials; botocore refuses to sign without.
                kwargs["aws_access_key_id"] = "local"
                kwargs["aws_secret_access_key"] = "local"
        client: DynamoDBClient = session.client("dynamodb", **kwargs)
    calls.install(client)
    metrics.instrument_client(client)
    failed_writes.install(client)
    attempts.install(client)
    return client


@dataclass(frozen=True)
class SharedClient:
    """A shared client and the faults its stores carry: ``None`` (no fault hook) unless
    fault injection attached to it (:mod:`reconciliation.dynamo.client_hooks`). Decided
    once, when the client is built, so no request path asks again."""

    client: DynamoDBClient
    faults: CodeFaults | None


def shared_client(region: Region | None = None, *, wait: Patience | None = None) -> SharedClient:
    """The shared client for ``region`` (default: the primary region), with its faults.

    Low-level boto3 clients are thread-safe; sessions are not, so each is built once
    under a lock. ``wait``: the client's patience (default: the request path's).
    """
    region = region or regions()[0]
    wait = wait or request_patience()
    key = (
        region,
        settings.DDB_CONNECT_TIMEOUT_S,
        wait,
        settings.FAULT_INJECTION,
        settings.ALLOW_FAULT_INJECTION,
    )
    shared = _shared.get(key)
    if shared is None:
        with _lock:
            shared = _shared.get(key)
            if shared is None:
                shared = _shared[key] = _shared_build(region, wait)
    return shared


def _shared_build(region: Region, wait: Patience) -> SharedClient:
    client = build_client(region, wait)
    return SharedClient(client, shared_client_hooks_run(client))


def dynamodb_client(
    region: Region | None = None, *, wait: Patience | None = None
) -> DynamoDBClient:
    """The shared client for ``region`` (:func:`shared_client`): with the fault hooks only
    where fault injection is configured."""
    return shared_client(region, wait=wait).client


def client_for_key(key: str) -> DynamoDBClient:
    return dynamodb_client(home_region(key))


def reset_clients() -> None:
    with _lock:
        _shared.clear()
