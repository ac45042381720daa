"""One configuration for every process (docs/regions.md, "One configuration").

Everything that decides where and how a write lands — the region map (region names and
the primary region), the ledger, counter, pending and audit-day shards, the token
window and the TTLs that change answers — must be the same in every process: web,
worker, beat and commands. Two processes that differ in any of it write one key in two
places, or answer one request two ways, and nothing in the write path can tell.

So ``manage.py ddb_setup`` records this configuration's :class:`Fingerprint` in every
region (``#CONFIG#<region>`` in that region's cases table: one item per region, written
only there, so Global Tables never meet two writers of it), every process compares its
own with the recorded ones at start (a Django system check, and the Celery worker and
beat refuse to start), and ``/healthz`` reports it. Changing it is a deliberate step:
``ddb_setup --accept-config`` overwrites the record, conditioned on the digest it read,
after an audited ``config_accepted`` event in the ``SYSTEM`` stream.

Left out on purpose: endpoints and the table prefix (where a process finds the tables,
not how it writes into them: a different prefix reads another table, which has no
record, and warns), the claim purge delay (TTL cost control, never an answer), timeouts
and retry budgets (how long a process waits, not what it writes), and the test-only
``DDB_UNPINNED`` switch (which exists to show the failure this prevents).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from reconciliation import clock
from reconciliation.audit.append import audit_event_append
from reconciliation.audit.models import AuditAction, AuditEvent
from reconciliation.cases.counters import COUNTER_SHARDS
from reconciliation.claims.models import TOKEN_WINDOW_S
from reconciliation.dynamo.client import regions
from reconciliation.dynamo.errors import error_code
from reconciliation.dynamo.items import from_item
from reconciliation.dynamo.tables import AUDIT_DAY_SHARDS, PENDING_SHARDS
from reconciliation.stores import every_store, first_store

if TYPE_CHECKING:
    from reconciliation.actors import Actor
    from reconciliation.stores import Store

CONFIG_PREFIX = "#CONFIG#"  # a cases-table key no case id can have (ids start "C-")


class ConfigState(StrEnum):
    """What a region's record says, compared with this process's configuration."""

    OK = "ok"
    DIFFERS = "differs"
    NOT_RECORDED = "not recorded"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Fingerprint:
    """Everything that decides where and how a write lands."""

    regions: tuple[str, ...]  # region names, sorted: the list's order decides nothing
    primary_region: str  # the untagged region
    ledger_shards: int
    counter_shards: int
    pending_shards: int
    audit_day_shards: int
    token_window_s: int  # RETRY_COMMIT reuses a token only inside it
    claim_pending_ttl_s: int  # the lease: 409 or a re-claim
    claim_failed_ttl_s: int  # the cool-off: 409 or a re-claim
    claim_completed_ttl_s: int  # a replay answered from the claim or the durable record
    stuck_grace_s: int  # when the sweep opens STUCK_PENDING
    override_ttl_s: int  # when an override request expires back to OPEN

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "regions": list(self.regions)}

    def canonical(self) -> str:
        """Sorted keys, compact, UTF-8 (the audit chain's canonical JSON)."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def differing(self, recorded: dict[str, Any]) -> list[str]:
        """The fields whose values differ from ``recorded`` (a stored ``as_dict``; a field
        only one side has differs too, so a record from another code version is named)."""
        mine = self.as_dict()
        return sorted(k for k in set(mine) | set(recorded) if mine.get(k) != recorded.get(k))


def config_fingerprint() -> Fingerprint:
    """This process's configuration."""
    all_regions = regions()
    return Fingerprint(
        regions=tuple(sorted(r.name for r in all_regions)),
        primary_region=all_regions[0].name,
        ledger_shards=int(settings.LEDGER_SHARDS),
        counter_shards=COUNTER_SHARDS,
        pending_shards=PENDING_SHARDS,
        audit_day_shards=AUDIT_DAY_SHARDS,
        token_window_s=TOKEN_WINDOW_S,
        claim_pending_ttl_s=int(settings.CLAIM_PENDING_TTL_S),
        claim_failed_ttl_s=int(settings.CLAIM_FAILED_TTL_S),
        claim_completed_ttl_s=int(settings.CLAIM_COMPLETED_TTL_S),
        stuck_grace_s=int(settings.STUCK_GRACE_S),
        override_ttl_s=int(settings.OVERRIDE_TTL_S),
    )


FINGERPRINT_FIELDS = tuple(f.name for f in fields(Fingerprint))


@dataclass(frozen=True)
class Recorded:
    digest: str
    config: dict[str, Any]
    recorded_at: str


class ConfigRepository:
    """One region's ``#CONFIG#<region>`` item in its cases table."""

    def __init__(self, store: Store):
        self.client = store.client
        self.table = store.tables.cases
        self.key = {"case_id": {"S": f"{CONFIG_PREFIX}{store.region_name}"}}

    def get(self) -> Recorded | None:
        item = from_item(
            self.client.get_item(TableName=self.table, Key=self.key, ConsistentRead=True).get(
                "Item"
            )
        )
        if not item:
            return None
        return Recorded(item["digest"], json.loads(item["config"]), item.get("recorded_at", ""))

    def put(self, fingerprint: Fingerprint, *, seen: str | None) -> None:
        """Record ``fingerprint``: where none is (``seen`` None), or over the record whose
        digest was ``seen`` (two acceptances racing: one wins, the other is refused and
        reads again). Raises the ConditionalCheckFailedException the loser gets."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "Item": {
                **self.key,
                "digest": {"S": fingerprint.digest},
                "config": {"S": fingerprint.canonical()},
                "recorded_at": {"S": clock.iso(clock.now())},
            },
        }
        if seen is None:
            kwargs["ConditionExpression"] = "attribute_not_exists(case_id)"
        else:
            kwargs["ConditionExpression"] = "digest = :seen"
            kwargs["ExpressionAttributeValues"] = {":seen": {"S": seen}}
        self.client.put_item(**kwargs)


@dataclass(frozen=True)
class RegionConfig:
    """One region's record compared with this process's configuration."""

    region: str
    state: ConfigState
    fields: tuple[str, ...] = ()
    recorded: Recorded | None = None
    problem: str = ""  # why unreachable (an error code or exception name, never a URL)

    def line(self) -> str:
        if self.state == ConfigState.DIFFERS:
            return f"{self.region}: differs ({', '.join(self.fields)})"
        if self.state == ConfigState.UNREACHABLE:
            return f"{self.region}: not checked ({self.problem})"
        return f"{self.region}: {self.state}"


def config_compare(stores: list[Store] | None = None) -> list[RegionConfig]:
    """Every region's record against this process's configuration (one consistent
    GetItem a region). Never raises for DynamoDB: an unreachable region, or one without
    tables yet, is reported as such."""
    mine = config_fingerprint()
    out = []
    for store in stores if stores is not None else every_store():
        try:
            recorded = ConfigRepository(store).get()
        except ClientError as exc:
            code = error_code(exc)
            state = (
                ConfigState.NOT_RECORDED
                if code == "ResourceNotFoundException"
                else ConfigState.UNREACHABLE
            )
            out.append(RegionConfig(store.region_name, state, problem=code))
            continue
        except BotoCoreError as exc:
            out.append(
                RegionConfig(store.region_name, ConfigState.UNREACHABLE, problem=type(exc).__name__)
            )
            continue
        if recorded is None:
            out.append(RegionConfig(store.region_name, ConfigState.NOT_RECORDED))
        elif recorded.digest == mine.digest:
            out.append(RegionConfig(store.region_name, ConfigState.OK, recorded=recorded))
        else:
            differing = tuple(mine.differing(recorded.config))
            out.append(RegionConfig(store.region_name, ConfigState.DIFFERS, differing, recorded))
    return out


def config_summary(compared: list[RegionConfig]) -> str:
    """One word or line for ``/healthz``: ``ok``, ``not recorded``, ``differs (fields)``
    or ``not checked``; never an endpoint."""
    differs = sorted({f for c in compared if c.state == ConfigState.DIFFERS for f in c.fields})
    if differs:
        return f"{ConfigState.DIFFERS} ({', '.join(differs)})"
    if any(c.state == ConfigState.UNREACHABLE for c in compared):
        return "not checked"
    if any(c.state == ConfigState.NOT_RECORDED for c in compared):
        return ConfigState.NOT_RECORDED
    return ConfigState.OK


class ConfigurationDiffers(ImproperlyConfigured):
    """This process's configuration differs from the one recorded: it must not serve."""


def config_differences(compared: list[RegionConfig]) -> list[str]:
    """One message per region whose record differs from this configuration."""
    return [
        f"configuration differs from the one recorded in {c.region}: {', '.join(c.fields)}"
        for c in compared
        if c.state == ConfigState.DIFFERS
    ]


def config_refuse_start() -> None:
    """Raise :class:`ConfigurationDiffers` when any region's record differs (the Celery
    worker and beat call it at start; web processes run the system check). A region
    not recorded yet or unreachable does not stop a start: the check warns."""
    problems = config_differences(config_compare())
    if problems:
        raise ConfigurationDiffers(
            "; ".join(problems)
            + ". Refusing to start. Make this process's settings match, or accept this "
            "configuration deliberately with `manage.py ddb_setup --accept-config`."
        )


def config_record(*, accept: bool, actor: Actor) -> list[str]:
    """Record this configuration in every region where none is; where one differs,
    raise :class:`ConfigurationDiffers` naming the fields, unless ``accept``: then an
    audited ``config_accepted`` event in the ``SYSTEM`` stream first (no change without
    its event), and each differing record is overwritten, conditioned on the digest read.
    Returns a line per region."""
    mine = config_fingerprint()
    stores = every_store()
    compared = config_compare(stores)
    for c in compared:
        if c.state == ConfigState.UNREACHABLE:
            raise ImproperlyConfigured(f"configuration not recorded in {c.region}: {c.problem}")
    differing = [c for c in compared if c.state == ConfigState.DIFFERS]
    if differing and not accept:
        raise ConfigurationDiffers(
            "; ".join(config_differences(compared))
            + ". Nothing was changed. If this configuration is the intended one, run "
            "`manage.py ddb_setup --accept-config` (audited), and restart every process "
            "with it."
        )
    if differing:
        _audit_acceptance(mine, differing, actor)
    lines = []
    for store, c in zip(stores, compared, strict=True):
        if c.state == ConfigState.OK:
            lines.append(f"{c.region}: configuration as recorded ({mine.digest[:12]})")
            continue
        seen = c.recorded.digest if c.recorded else None
        ConfigRepository(store).put(mine, seen=seen)
        verb = "accepted" if seen else "recorded"
        lines.append(f"{c.region}: configuration {verb} ({mine.digest[:12]})")
    return lines


def _audit_acceptance(mine: Fingerprint, differing: list[RegionConfig], actor: Actor) -> None:
    audit_event_append(
        first_store(),
        stream="SYSTEM",
        event=AuditEvent(
            action=AuditAction.CONFIG_ACCEPTED,
            actor=actor,
            before={c.region: c.recorded.config for c in differing if c.recorded},
            after=mine.as_dict(),
            detail={
                "regions": [c.region for c in differing],
                "fields": sorted({f for c in differing for f in c.fields}),
                "digest_before": {c.region: c.recorded.digest for c in differing if c.recorded},
                "digest_after": mine.digest,
            },
        ),
    )
