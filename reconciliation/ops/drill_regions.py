"""The drill's two-region scenario (docs/regions.md), run when ``DDB_REGIONS`` names
several engines; with one region it is reported as not applicable, never as failed.

With keys of its own it proves three things:

7. a key homed in each region commits in its home region only: the claim, the pledge
   and its ``pledge_recorded`` receipt are in the home region's tables, and the other
   region holds none of them, or, where the Global Tables stand-in (``manage.py
   replicate_regions``) copied them, the same items, while the receipt's stream (named
   for the region that wrote it) exists only for the home region: the home holds the
   original;
8. a case opened in the second region (a crash between claim and commit, found by the
   sweep) has an id that names its region, is listed by the queue page read over every
   region, and is resolved by RETRY_COMMIT in its region;
9. the fund's total sums both regions' ledger shards, each region holding the amounts of
   the keys it owns.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from reconciliation.audit.models import AuditAction
from reconciliation.cases.vocabulary import CaseState, CaseType
from reconciliation.casework.selectors import QueueFilters, queue_page
from reconciliation.claims.ledger import LedgerRepository, fund_total
from reconciliation.claims.models import OPERATION_CREATE_PLEDGE, claim_pk, intent_id_for
from reconciliation.claims.outcomes import OutcomeKind
from reconciliation.ops.drill_report import DrillStatus
from reconciliation.stores import Store, case_tag, every_store, home_store, pledge_stream

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

    from reconciliation.ops.drill_scenarios import Drill

SCENARIO = "7 two regions"
# Keys tried before giving up on finding one homed in a region (each region owns about
# half of all keys, so a handful suffices; the bound keeps a broken hash from looping).
KEY_TRIES = 64


def regions_scenario(drill: Drill) -> None:
    stores = every_store()
    if len(stores) < 2:
        drill.row(
            SCENARIO,
            "run when DDB_REGIONS names two engines",
            f"one region configured ({stores[0].region_name})",
            None,
            status=DrillStatus.NOT_APPLICABLE,
        )
        return
    homed = _keys_homed(drill, stores)
    _home_only(drill, stores, homed)
    _second_region_case(drill, stores)
    _ledger_sums_regions(drill, stores, homed)


def _keys_homed(drill: Drill, stores: list[Store]) -> dict[str, str]:
    """One fresh drill key per region, homed there: region name → key."""
    wanted = {store.region_name for store in stores}
    homed: dict[str, str] = {}
    for _ in range(KEY_TRIES):
        if len(homed) == len(wanted):
            break
        key = drill.key()
        homed.setdefault(drill.store(key).region_name, key)
    return homed


def _raw(store: Store, table: str, key: dict[str, Any]) -> dict[str, AttributeValueTypeDef] | None:
    return store.client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")


def _receipt(store: Store, stream: str) -> bool:
    page = store.client.query(
        TableName=store.tables.audit_events,
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "stream"},
        ExpressionAttributeValues={":s": {"S": stream}},
        ConsistentRead=True,
        Limit=5,
    )
    return any(
        item.get("action", {}).get("S") == AuditAction.PLEDGE_RECORDED for item in page["Items"]
    )


def _where(stores: list[Store], key: str) -> tuple[bool, list[str]]:
    """Whether ``key``'s claim, pledge and receipt are in its home region only (or copied
    unchanged elsewhere, the original's stream in the home alone), and what was seen."""
    pk = claim_pk("drill", OPERATION_CREATE_PLEDGE, key)
    intent = intent_id_for("drill", key)
    home = home_store(pk)
    items = {
        "claim": (home.tables.idempotency_keys, {"pk": {"S": pk}}),
        "pledge": (home.tables.pledges, {"intent_id": {"S": intent}}),
    }
    seen = {name: _raw(home, table, k) for name, (table, k) in items.items()}
    ok = all(seen.values()) and _receipt(home, pledge_stream(intent, home.tag))
    words = ["in its home" if ok else "missing from its home"]
    for other in stores:
        if other.region_name == home.region_name:
            continue
        copies = {name: _raw(other, table, k) for name, (table, k) in items.items()}
        # A copy is a replica only if it is the home's item unchanged; a receipt in a
        # stream named for the other region would mean that region wrote the pledge.
        foreign = _receipt(other, pledge_stream(intent, other.tag))
        changed = [n for n, item in copies.items() if item is not None and item != seen[n]]
        copied = [n for n, item in copies.items() if item is not None and item == seen[n]]
        ok = ok and not foreign and not changed
        if foreign or changed:
            words.append(f"written in {other.region_name} too")
        elif copied:
            words.append(f"copied unchanged to {other.region_name}")
        else:
            words.append(f"absent from {other.region_name}")
    return ok, words


def _home_only(drill: Drill, stores: list[Store], homed: dict[str, str]) -> None:
    observed: list[str] = []
    ok = len(homed) == len(stores)
    for store in stores:
        key = homed.get(store.region_name)
        if key is None:
            observed.append(f"{store.region_name}: no key homed there")
            continue
        outcome = drill.submit(key)
        created = outcome.kind == OutcomeKind.CREATED
        if created:
            drill.committed.append(key)
        placed, words = _where(stores, key)
        ok = ok and created and placed
        observed.append(f"{store.region_name} key: " + ", ".join(words))
    drill.row(
        f"{SCENARIO}: keys commit at home",
        "claim, pledge, receipt in the key's home region only",
        "; ".join(observed),
        ok,
    )


def _listed(drill: Drill, stores: list[Store], case_id: str) -> bool:
    """Whether the queue page read over every region lists ``case_id`` (the drill's own
    fund only, in fund order, so the read stays small)."""
    filters = QueueFilters(fund=drill.fund, sort="fund", drill=True)
    cursor = None
    for _ in range(20):
        page = queue_page(CaseType.STUCK_PENDING, filters=filters, cursor=cursor, stores=stores)
        if any(row.case_id == case_id for row in page.rows):
            return True
        cursor = page.next_cursor
        if not cursor:
            return False
    return False


def _second_region_case(drill: Drill, stores: list[Store]) -> None:
    second = stores[1]
    scenario = f"{SCENARIO}: a case in {second.region_name}"
    key = next(
        (k for k in (drill.key() for _ in range(KEY_TRIES)) if drill.store(k).tag == second.tag),
        None,
    )
    if key is None:
        drill.row(scenario, "a key homed there", "no key found homed there", False)
        return
    case = drill.crashed_case(key)
    if case is None:
        drill.row(scenario, "the sweep opens a case there", "the sweep opened nothing", False)
        return
    names = case_tag(case.case_id) == second.tag
    listed = _listed(drill, stores, case.case_id)
    observed = [
        f"{CaseType.words(case.case_type)} case {case.case_id}",
        f"id {'names' if names else 'does not name'} {second.region_name}",
        f"queue page over every region {'lists' if listed else 'does not list'} it",
    ]
    applied, final = drill.crashed_recover(
        case, key, reason_text="Drill: recover the crashed intent in its own region."
    )
    resolved = final is not None and final.state == CaseState.RESOLVED
    observed.append("retry resolved it" if resolved else "retry left it open")
    ok = case.case_type == CaseType.STUCK_PENDING and names and listed and applied and resolved
    drill.row(
        scenario,
        "its id names its region; listed over every region; retry resolves it",
        "; ".join(observed),
        ok,
    )


def _ledger_sums_regions(drill: Drill, stores: list[Store], homed: dict[str, str]) -> None:
    parts = {s.region_name: LedgerRepository(s).total(drill.fund, "USD") for s in stores}
    total = fund_total(stores, drill.fund, "USD")
    summed = sum((p.pledged_total for p in parts.values()), Decimal(0))
    counted = sum(p.pledge_count for p in parts.values())
    # Each region holds at least the amount of the key it owns (the drill's other keys
    # land wherever their hash homes them).
    owned = all(parts[region].pledge_count >= 1 for region in homed)
    ok = owned and (total.pledged_total, total.pledge_count) == (summed, counted)
    shares = ", ".join(f"{r} {p.pledged_total:.2f} ({p.pledge_count})" for r, p in parts.items())
    drill.row(
        f"{SCENARIO}: ledger over every region",
        "the fund's total sums each region's shards",
        f"{shares}; total {total.pledged_total:.2f} ({total.pledge_count})",
        ok,
    )
