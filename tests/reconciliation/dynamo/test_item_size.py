"""Item sizes and write units: the documented rules on hand-built items, and the computed
units against what DynamoDB Local reports on the project's own tables."""

from __future__ import annotations

import pytest

from reconciliation.dynamo.item_size import (
    documented_number_size,
    index_entry,
    index_write_units,
    item_size,
    number_size,
    read_units,
    write_cost,
    write_units,
)
from reconciliation.dynamo.tables import Table, table_definitions


def _table(names, attr: str) -> Table:
    name = getattr(names, attr)
    return next(t for t in table_definitions(names) if t.name == name)


def _index(table: Table, name: str):
    return next(i for i in table.indexes if i.name == name)


def _padded(item: dict, size: int, name: str = "fill") -> dict:
    """``item`` plus a string attribute that brings it to ``size`` bytes, computed."""
    padded = {**item, name: {"S": ""}}
    padded[name] = {"S": "x" * (size - item_size(padded))}
    assert item_size(padded) == size
    return padded


# --- the rules on hand-built items ---------------------------------------------------


def test_strings_and_names_count_utf8_bytes():
    """Attribute names and strings count their UTF-8 bytes, not their characters."""
    assert item_size({"pk": {"S": "abc"}}) == 5
    # é is 2 bytes, € 3, 😀 4; the name "ünï" is 5.
    assert item_size({"ünï": {"S": "é€😀"}}) == 5 + 9
    assert item_size({"e": {"S": ""}}) == 1


@pytest.mark.parametrize(
    ("number", "engine", "documented"),
    [
        ("110.90", 4, 3),  # 1|10|.90: the digits straddle the point at an odd offset
        ("110.9", 4, 3),
        ("12.5", 3, 3),
        ("1.25", 3, 3),
        ("0.001", 2, 2),  # leading zeros trimmed
        ("100", 2, 2),  # trailing zeros trimmed
        ("1796000000", 3, 3),  # an epoch second
        ("12345678901234567890", 11, 11),
        ("0", 1, 1),
        ("-1", 3, 2),  # a negative carries one more byte
    ],
)
def test_number_sizes(number, engine, documented):
    """Numbers: the guide's 1 byte per two significant digits plus 1, and the engine's
    exact count (base-100 pairs aligned on the point, +1 when negative)."""
    assert documented_number_size(number) == documented
    assert number_size(number) == engine
    assert item_size({"n": {"N": number}}) == 1 + engine


def test_binary_null_bool_and_sets():
    """Binary counts raw bytes, NULL and BOOL 1 byte, a set the sum of its elements."""
    assert item_size({"b": {"B": b"\x00\x01\x02"}}) == 4
    assert item_size({"z": {"NULL": True}, "t": {"BOOL": False}}) == 4
    assert item_size({"s": {"SS": ["ab", "cde"]}}) == 6
    assert item_size({"s": {"NS": ["1", "110.9"]}}) == 1 + 2 + 4
    assert item_size({"s": {"BS": [b"ab", b"c"]}}) == 4


def test_lists_and_maps_carry_three_bytes_and_one_per_element():
    """A list or map costs 3 bytes, 1 per element, the elements, and a map its keys."""
    assert item_size({"m": {"M": {}}}) == 1 + 3
    assert item_size({"m": {"M": {"k": {"S": "vv"}}}}) == 1 + 3 + 1 + 1 + 2
    assert item_size({"m": {"M": {"k": {"S": "vv"}, "kk": {"N": "12"}}}}) == 1 + 3 + 4 + 5
    assert item_size({"l": {"L": []}}) == 1 + 3
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}) == 1 + 3 + 3 + 3
    nested = {"l": {"L": [{"M": {"a": {"L": [{"S": "x"}]}}}]}}
    assert item_size(nested) == 1 + 3 + 1 + (3 + 1 + 1 + (3 + 1 + 1))


def test_write_and_read_units_round_up():
    """Writes come in 1 KB steps, reads in 4 KB steps; at least one step; eventual
    consistency halves a read."""
    assert [write_units(n) for n in (0, 1, 1023, 1024, 1025, 2048, 2049)] == [1, 1, 1, 1, 2, 2, 3]
    assert read_units(4096, consistent=True) == 1.0
    assert read_units(4097, consistent=True) == 2.0
    assert read_units(10, consistent=False) == 0.5
    assert read_units(8193, consistent=False) == 1.5


def test_index_entries_follow_projection_and_sparseness():
    """KEYS_ONLY keeps table and index keys, INCLUDE adds its list, ALL the whole item;
    an item without the index key is in no entry."""
    from reconciliation.dynamo.client import TableNames

    names = TableNames.from_prefix("x-")
    claims, cases = _table(names, "idempotency_keys"), _table(names, "cases")
    claim = {
        "pk": {"S": "t#pledge#k"},
        "status": {"S": "PENDING"},
        "pending_shard": {"S": "P#3"},
        "expires_at": {"N": "1796000000"},
    }
    pending = _index(claims, "pending_by_expiry")
    assert index_entry(claim, claims, pending) == {
        "pk": claim["pk"],
        "pending_shard": claim["pending_shard"],
        "expires_at": claim["expires_at"],
    }
    completed = {k: v for k, v in claim.items() if k != "pending_shard"}
    assert index_entry(completed, claims, pending) is None
    case = {
        "case_id": {"S": "c1"},
        "queue": {"S": "STUCK_PENDING"},
        "queue_sort": {"S": "2026#c1"},
        "state": {"S": "OPEN"},
        "notes": {"S": "not projected"},
    }
    assert index_entry(case, cases, _index(cases, "open_by_queue")) == {
        k: case[k] for k in ("case_id", "queue", "queue_sort", "state")
    }
    audit = _table(names, "audit_events")
    event = {"stream": {"S": "s"}, "seq": {"N": "1"}, "day_shard": {"S": "d"}, "at_id": {"S": "a"}}
    assert index_entry(event, audit, audit.indexes[0]) == event


def test_index_write_rules():
    """Appear 1 write, disappear 1, key change 2, projected change 1, other change 0;
    transactional doubles, and the base table bills the larger image."""
    from reconciliation.dynamo.client import TableNames

    names = TableNames.from_prefix("x-")
    cases = _table(names, "cases")
    by_queue = _index(cases, "open_by_queue")
    base = {"case_id": {"S": "c1"}, "state": {"S": "OPEN"}, "notes": {"S": "n" * 3000}}
    queued = {**base, "queue": {"S": "Q"}, "queue_sort": {"S": "a"}}
    assert index_write_units(base, queued, cases, by_queue) == 1
    assert index_write_units(queued, base, cases, by_queue) == 1
    assert index_write_units(queued, {**queued, "queue_sort": {"S": "b"}}, cases, by_queue) == 2
    assert index_write_units(queued, {**queued, "state": {"S": "HELD"}}, cases, by_queue) == 1
    assert index_write_units(queued, {**queued, "notes": {"S": "m"}}, cases, by_queue) == 0
    assert index_write_units(None, None, cases, by_queue) == 0
    cost = write_cost(queued, {**queued, "queue_sort": {"S": "b"}}, cases, transactional=True)
    assert cost == {cases.name: 6, "open_by_queue": 4}


# --- against DynamoDB Local ----------------------------------------------------------


def _reported(consumed) -> dict[str, int]:
    """Units per table (its name) and per index (its name) from ``ConsumedCapacity``."""
    entries = consumed if isinstance(consumed, list) else [consumed]
    units: dict[str, int] = {}
    for entry in entries:
        units[entry["TableName"]] = int(entry.get("Table", entry)["CapacityUnits"])
        for name, index in entry.get("GlobalSecondaryIndexes", {}).items():
            units[name] = int(index["CapacityUnits"])
    return units


def _get(client, table: Table, key: dict) -> dict | None:
    return client.get_item(TableName=table.name, Key=key, ConsistentRead=True).get("Item")


def _put(client, table: Table, item: dict) -> dict[str, int]:
    response = client.put_item(TableName=table.name, Item=item, ReturnConsumedCapacity="INDEXES")
    return _reported(response["ConsumedCapacity"])


FEATURES = {
    "strings": {"name": {"S": "donor"}},
    "multibyte": {"ünï": {"S": "é€😀" * 7}},
    "numbers": {"a": {"N": "12.5"}, "b": {"N": "0.001"}, "c": {"N": "12345678901234567890"}},
    "map": {"m": {"M": {"k": {"S": "vv"}, "kk": {"N": "12"}, "e": {"M": {}}}}},
    "list": {"l": {"L": [{"S": "ab"}, {"N": "1"}, {"L": [{"BOOL": True}]}]}},
    "sets": {"ss": {"SS": ["ab", "cde"]}, "ns": {"NS": ["1", "7"]}, "bs": {"BS": [b"ab"]}},
    "binary_null": {"b": {"B": b"\x00\x01\x02"}, "z": {"NULL": True}},
    # Where the guide's approximation and the engine part: counted the engine's way.
    "odd_offset_and_negative_numbers": {"a": {"N": "110.90"}, "b": {"N": "-123"}},
}


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.parametrize(("size", "units"), [(1023, 1), (1024, 1), (1025, 2)])
def test_put_item_units_match_engine_at_1kb(ddb, feature, size, units):
    """A pledge item holding each kind of value, padded to 1,023 / 1,024 / 1,025 bytes
    computed, costs 1 / 1 / 2 units on the engine: a sizing error of one byte fails."""
    pledges = _table(ddb.tables, "pledges")
    item = _padded({"intent_id": {"S": f"t#{feature}"}, **FEATURES[feature]}, size)
    assert write_cost(None, item, pledges, transactional=False) == {pledges.name: units}
    assert _put(ddb.client, pledges, item) == {pledges.name: units}


@pytest.mark.dynamodb_local_only
def test_engine_counts_numbers_by_aligned_pairs_not_the_documented_approximation(ddb):
    """An item of 1,024 bytes by the guide's number rule but 1,025 by the engine's (110.90
    is 4 bytes, not 3) costs 2 units on the engine: the engine's count is the one used."""
    pledges = _table(ddb.tables, "pledges")
    item = _padded({"intent_id": {"S": "t#n"}, "amount": {"N": "110.90"}}, 1025)
    assert item_size(item) - number_size("110.90") + documented_number_size("110.90") == 1024
    assert _put(ddb.client, pledges, item) == {pledges.name: 2}


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize(("size", "units"), [(1023, 1), (1024, 1), (1025, 2)])
def test_index_entries_at_1kb_carry_no_100_byte_overhead(ddb, size, units):
    """Index entries of 1,023 / 1,024 / 1,025 bytes computed (KEYS_ONLY, INCLUDE, ALL)
    cost 1 / 1 / 2 units: the 100 bytes AWS adds for index storage are not written."""
    claims = _table(ddb.tables, "idempotency_keys")
    claim = {"pending_shard": {"S": "P#3"}, "expires_at": {"N": "1796000000"}}
    claim = _padded({**claim, "status": {"S": "PENDING"}}, size + 40, "response")
    claim["pk"] = {"S": ""}
    pending = _index(claims, "pending_by_expiry")
    claim["pk"] = {"S": "k" * (size - item_size(index_entry(claim, claims, pending)))}
    assert item_size(index_entry(claim, claims, pending)) == size
    assert index_write_units(None, claim, claims, pending) == units
    assert _put(ddb.client, claims, claim)["pending_by_expiry"] == units

    cases = _table(ddb.tables, "cases")
    case = {"case_id": {"S": "c1"}, "queue": {"S": "Q"}, "queue_sort": {"S": "s"}}
    by_queue = _index(cases, "open_by_queue")
    case = _padded(case, size, "tenant")  # projected by open_by_queue
    case["notes"] = {"S": "n" * 1500}  # not projected: the base item is 3 units
    assert item_size(index_entry(case, cases, by_queue)) == size
    assert index_write_units(None, case, cases, by_queue) == units
    reported = _put(ddb.client, cases, case)
    assert reported[cases.name] == 3
    assert reported["open_by_queue"] == units

    audit = _table(ddb.tables, "audit_events")
    event = {"stream": {"S": "s"}, "seq": {"N": "1"}, "day_shard": {"S": "d"}, "at_id": {"S": "a"}}
    event = _padded(event, size)
    assert write_cost(None, event, audit, transactional=False) == {
        audit.name: units,
        "by_day": units,
    }
    assert _put(ddb.client, audit, event) == {audit.name: units, "by_day": units}


def _update_matches(ddb, table: Table, key: dict, expression: str, values: dict) -> dict:
    """Run one UpdateItem; assert the engine reports what the images before and after
    it cost by the rules; return the computed units."""
    before = _get(ddb.client, table, key)
    names = {"ExpressionAttributeNames": {"#st": "state"}} if "#st" in expression else {}
    response = ddb.client.update_item(
        TableName=table.name,
        Key=key,
        UpdateExpression=expression,
        ExpressionAttributeValues=values,
        ReturnConsumedCapacity="INDEXES",
        **names,
    )
    computed = write_cost(before, _get(ddb.client, table, key), table, transactional=False)
    assert _reported(response["ConsumedCapacity"]) == computed, expression
    return computed


@pytest.mark.dynamodb_local_only
def test_update_item_units_match_engine_per_index(ddb):
    """A case walked through index keys set, changed, projected and unprojected
    attributes changed, keys removed: each UpdateItem's table and per-index units, as
    computed from the images before and after, equal what the engine reports."""
    cases = _table(ddb.tables, "cases")
    key = {"case_id": {"S": "c1"}}
    case = {
        **key,
        "case_type": {"S": "STUCK_PENDING"},
        "state": {"S": "OPEN"},
        "intent_id": {"S": "t#k"},
        "opened_at": {"S": "2026-12-01T10:00:00Z"},
        "donor_ref": {"S": "D-1"},
        "donor_key": {"S": "d-1"},
        "fund": {"S": "GENERAL"},
        "amount": {"N": "110.90"},
        # (888: the item stays just under 1 KB with the folded donor_key beside the ref.)
        "tenant": {"S": "t" * 888},
    }
    assert _put(ddb.client, cases, case) == {cases.name: 1, "by_intent": 1, "by_donor_key": 1}
    steps = [
        ("SET queue = :q, queue_sort = :s", {":q": {"S": "STUCK"}, ":s": {"S": "a" * 200}}),
        ("SET assignee = :a", {":a": {"S": "staff-1"}}),
        ("SET queue_sort = :s", {":s": {"S": "b"}}),
        ("SET #st = :v", {":v": {"S": "HELD"}}),
        ("SET notes = :n", {":n": {"S": "n" * 1500}}),
        ("SET amount = :m", {":m": {"N": "-12.5"}}),
        (
            "REMOVE queue, queue_sort SET resolved_month = :m, resolved_sort = :s",
            {":m": {"S": "2026-12"}, ":s": {"S": "z"}},
        ),
    ]
    seen: set[str] = set()
    for expression, values in steps:
        seen.update(_update_matches(ddb, cases, key, expression, values))
    # Every index of the table was written at least once along the way (by_day, like
    # by_intent and by_donor_key, is keyed by what the case is opened with).
    assert seen >= {i.name for i in cases.indexes} - {"by_intent", "by_donor_key", "by_day"}


@pytest.mark.dynamodb_local_only
def test_transact_write_units_match_engine(ddb):
    """A pledge commit shaped like the real one (pledge put, ledger update, audit put,
    claim PENDING→COMPLETED leaving pending_by_expiry) is reported at exactly the
    computed units, every one doubled."""
    claims, pledges = _table(ddb.tables, "idempotency_keys"), _table(ddb.tables, "pledges")
    ledger, audit = _table(ddb.tables, "ledger"), _table(ddb.tables, "audit_events")
    claim_key = {"pk": {"S": "t#pledge#k"}}
    claim = {
        **claim_key,
        "status": {"S": "PENDING"},
        "version": {"N": "1"},
        "pending_shard": {"S": "P#3"},
        "expires_at": {"N": "1796000000"},
    }
    ddb.client.put_item(TableName=claims.name, Item=_padded(claim, 1000, "payload_hash"))
    ledger_item = {"fund": {"S": "GENERAL#USD"}, "pledged_total": {"N": "5"}}
    ddb.client.put_item(TableName=ledger.name, Item={**ledger_item, "pledge_count": {"N": "1"}})
    pledge = _padded({"intent_id": {"S": "t#k"}, "amount": {"N": "110.90"}}, 1025)
    event = _padded(
        {"stream": {"S": "PLEDGE#t#k"}, "seq": {"N": "1"}, "day_shard": {"S": "d#1"}}
        | {"at_id": {"S": "a"}},
        700,
    )
    before_claim, before_ledger = (
        _get(ddb.client, claims, claim_key),
        _get(ddb.client, ledger, {"fund": ledger_item["fund"]}),
    )
    response = ddb.client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": pledges.name, "Item": pledge}},
            {
                "Update": {
                    "TableName": ledger.name,
                    "Key": {"fund": ledger_item["fund"]},
                    "UpdateExpression": "ADD pledged_total :a, pledge_count :one",
                    "ExpressionAttributeValues": {":a": {"N": "110.90"}, ":one": {"N": "1"}},
                }
            },
            {"Put": {"TableName": audit.name, "Item": event}},
            {
                "Update": {
                    "TableName": claims.name,
                    "Key": claim_key,
                    "UpdateExpression": "SET #s = :done REMOVE pending_shard",
                    "ExpressionAttributeNames": {"#s": "status"},
                    "ExpressionAttributeValues": {":done": {"S": "COMPLETED"}},
                }
            },
        ],
        ReturnConsumedCapacity="INDEXES",
    )
    after_claim = _get(ddb.client, claims, claim_key)
    after_ledger = _get(ddb.client, ledger, {"fund": ledger_item["fund"]})
    computed = (
        write_cost(None, pledge, pledges, transactional=True)
        | write_cost(before_ledger, after_ledger, ledger, transactional=True)
        | write_cost(None, event, audit, transactional=True)
        | write_cost(before_claim, after_claim, claims, transactional=True)
    )
    assert computed == {
        pledges.name: 4,
        ledger.name: 2,
        audit.name: 2,
        "by_day": 2,
        claims.name: 2,
        "pending_by_expiry": 2,
    }
    assert _reported(response["ConsumedCapacity"]) == computed


@pytest.mark.dynamodb_local_only
@pytest.mark.parametrize(("sizes", "engine"), [((100, 100, 100), 2), ((1500, 100, 1500), 6)])
def test_engine_counts_equal_item_units_once_per_table_in_a_transaction(ddb, sizes, engine):
    """Engine, not AWS: in one TransactWriteItems DynamoDB Local sums the *distinct*
    per-item units of a table (three 1-unit puts report 2, not 6); AWS bills each item,
    which is what ``write_cost`` adds up."""
    pledges = _table(ddb.tables, "pledges")
    items = [_padded({"intent_id": {"S": f"t#{n}"}}, size) for n, size in enumerate(sizes)]
    computed = sum(write_cost(None, i, pledges, transactional=True)[pledges.name] for i in items)
    response = ddb.client.transact_write_items(
        TransactItems=[{"Put": {"TableName": pledges.name, "Item": i}} for i in items],
        ReturnConsumedCapacity="INDEXES",
    )
    assert computed == 2 * sum(write_units(s) for s in sizes)
    assert _reported(response["ConsumedCapacity"]) == {pledges.name: engine}
