"""The index alternatives of ``bench/index_alternatives.py``, each a set of patches of the
write path (``unittest.mock.patch``) plus, where the alternative changes the schema, the
table definitions its tables are created with. Nothing here changes production code.

The alternatives are named in ``TITLES``; ``applied(key)`` applies one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from unittest import mock

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation import clock
from reconciliation.audit.repository import day_shard, event_hash
from reconciliation.claims import intake
from reconciliation.claims.models import ClaimStatus, Pledge
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.claims.pledges import PledgeRepository
from reconciliation.claims.repository import ClaimRepository, ClaimTaken, Finalisation
from reconciliation.dynamo import tables
from reconciliation.dynamo.retry import RetriesExhausted

KEYS_ONLY = {"ProjectionType": "KEYS_ONLY"}
# 3c: the per-day-shard item, in the ledger table under a key no fund can have (as the
# drift check's checkpoint is): in audit_events it would be a stream without a chain.
BUCKET_PREFIX = "#DAY#"

TITLES = {
    "0": "today",
    "1": "commit keeps `pending_shard`, still SETs `expires_at`",
    "2a": "claim put writes the completed horizon as `expires_at`, commit keeps the entry",
    "2b": "commit touches neither `pending_shard` nor `expires_at` (`replay_until` instead)",
    "3a": "receipt without `day_shard`; the pledge carries it (`pledges.by_day`, KEYS_ONLY)",
    "3b": "receipt without `day_shard`; the claim put carries it (claims index, KEYS_ONLY)",
    "3c": "receipt without `day_shard`; the commit ADDs the intent to a per-day-shard item",
    "4": "`audit_events.by_day` projected KEYS_ONLY",
    "5": "commit ConditionChecks the claim; the claim is completed after it, alone",
}
SWEEP_ALTERNATIVES = ("0", "1", "2a", "2b", "5")  # the ones that change the pending index
DAY_ALTERNATIVES = ("3a", "3b", "3c", "4")  # the ones that change how a day is found

_real_definitions = tables.table_definitions
_real_complete = ClaimRepository.complete_item
_real_new_claim = ClaimRepository.new_claim
_real_to_item = ClaimRepository._to_item
_real_receipt = intake.pledge_for_claim
_real_commit_items = intake.commit_items
_real_pledge_put = PledgeRepository.put_item
_real_pledge_commit = intake.pledge_commit


def definitions(key: str):
    """``table_definitions`` for alternative ``key``."""

    def build(names):
        out = []
        for table in _real_definitions(names):
            extra: tuple[tables.Index, ...] = ()
            if key == "4" and table.name == names.audit_events:
                table = dataclasses.replace(
                    table,
                    indexes=(
                        tables.Index("by_day", ("day_shard", "S"), ("at_id", "S"), KEYS_ONLY),
                    ),
                )
            if key == "3a" and table.name == names.pledges:
                extra = (tables.Index("by_day", ("day_shard", "S"), ("at_id", "S"), KEYS_ONLY),)
            if key == "3b" and table.name == names.idempotency_keys:
                extra = (
                    tables.Index(
                        "receipts_by_day", ("receipt_day", "S"), ("receipt_at", "S"), KEYS_ONLY
                    ),
                )
            out.append(dataclasses.replace(table, indexes=table.indexes + extra))
        return out

    return build


def _without_remove(item: dict) -> dict:
    update = item["Update"]
    update["UpdateExpression"] = update["UpdateExpression"].replace(" REMOVE pending_shard", "")
    return item


def _complete_keeps_entry(self, claim, response_body):  # 1, 2a
    return _without_remove(_real_complete(self, claim, response_body))


def _complete_untouched(self, claim, response_body):  # 2b
    item = _without_remove(_real_complete(self, claim, response_body))
    update = item["Update"]
    update["UpdateExpression"] = update["UpdateExpression"].replace(
        "expires_at = :exp", "replay_until = :exp"
    )
    return item


def _long_horizon_claim(self, **kwargs):  # 2a
    return _real_new_claim(self, **{**kwargs, "lease_s": settings.CLAIM_COMPLETED_TTL_S})


def _receipt_shard(claim) -> tuple[str, str]:
    """Where the receipt of ``claim`` would sit in ``by_day``: its day shard and at_id."""
    return day_shard(claim.claimed, claim.intent_id), f"{claim.claimed_at}#{claim.intent_id}"


def _receipt_unindexed(claim, region_tag: str = ""):  # 3a, 3b, 3c
    pledge, receipt = _real_receipt(claim, region_tag)
    bare = {k: v for k, v in receipt.items() if k not in ("day_shard", "at_id", "hash")}
    bare["hash"] = event_hash(bare)
    return Pledge(**{**pledge.__dict__, "audit_head": bare["hash"]}), bare


def _pledge_put_with_day(self, pledge: Pledge) -> dict:  # 3a
    item = _real_pledge_put(self, pledge)
    at = clock.parse_iso(pledge.created_at)
    item["Put"]["Item"]["day_shard"] = {"S": day_shard(at, pledge.intent_id)}
    item["Put"]["Item"]["at_id"] = {"S": f"{pledge.created_at}#{pledge.intent_id}"}
    return item


def _claim_item_with_day(claim) -> dict:  # 3b
    item = _real_to_item(claim)
    shard, at_id = _receipt_shard(claim)
    item["receipt_day"], item["receipt_at"] = {"S": shard}, {"S": at_id}
    return item


def _commit_items_with_bucket(store, claim):  # 3c
    items, pledge = _real_commit_items(store, claim)
    shard, _ = _receipt_shard(claim)
    bucket = {
        "Update": {
            "TableName": store.tables.ledger,
            "Key": {"fund": {"S": f"{BUCKET_PREFIX}{shard}"}},
            "UpdateExpression": "ADD intents :i",
            "ExpressionAttributeValues": {":i": {"SS": [claim.intent_id]}},
        }
    }
    return [*items, bucket], pledge


def _commit_items_check_only(store, claim):  # 5
    items, pledge = _real_commit_items(store, claim)
    # The claim's completion, wherever it sits among the commit's items.
    at = next(
        i
        for i, item in enumerate(items)
        if item.get("Update", {}).get("TableName") == store.tables.idempotency_keys
    )
    update = items[at]["Update"]
    values = update["ExpressionAttributeValues"]
    items[at] = {
        "ConditionCheck": {
            "TableName": update["TableName"],
            "Key": update["Key"],
            "ConditionExpression": "version = :v AND #st = :pending",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {":v": values[":v"], ":pending": values[":pending"]},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    return items, pledge


def _commit_then_complete(store, claim, *, fresh: bool = False):  # 5
    outcome = _real_pledge_commit(store, claim, fresh=fresh)
    if outcome.kind == OutcomeKind.CREATED:
        # Fenced on the version the commit checked. The pledge is recorded whatever this
        # write meets (the answer stays 201): a claim it leaves PENDING, like a crash
        # before it, is one the sweep resolves on the evidence of the pledge.
        with contextlib.suppress(ClaimTaken, BotoCoreError, ClientError, RetriesExhausted):
            ClaimRepository(store).finalise(
                claim,
                Finalisation(
                    status=ClaimStatus.COMPLETED,
                    response_body=outcome.pledge,
                    expires_in_s=settings.CLAIM_COMPLETED_TTL_S,
                ),
            )
    return outcome


@contextlib.contextmanager
def applied(key: str) -> Iterator[None]:
    """Alternative ``key``'s patches (and table definitions) inside the block."""
    patches = [mock.patch.object(tables, "table_definitions", definitions(key))]
    if key in ("1", "2a"):
        patches.append(mock.patch.object(ClaimRepository, "complete_item", _complete_keeps_entry))
    if key == "2a":
        patches.append(mock.patch.object(ClaimRepository, "new_claim", _long_horizon_claim))
    if key == "2b":
        patches.append(mock.patch.object(ClaimRepository, "complete_item", _complete_untouched))
    if key.startswith("3"):
        patches.append(mock.patch.object(intake, "pledge_for_claim", _receipt_unindexed))
    if key == "3a":
        patches.append(mock.patch.object(PledgeRepository, "put_item", _pledge_put_with_day))
    if key == "3b":
        patches.append(
            mock.patch.object(ClaimRepository, "_to_item", staticmethod(_claim_item_with_day))
        )
    if key == "3c":
        patches.append(mock.patch.object(intake, "commit_items", _commit_items_with_bucket))
    if key == "5":
        patches.append(mock.patch.object(intake, "commit_items", _commit_items_check_only))
        patches.append(mock.patch.object(intake, "pledge_commit", _commit_then_complete))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield
