"""Intake throughput on DynamoDB Local: the service layer against (a) raw boto3 issuing the
same calls and (b) AWS Lambda Powertools' ``idempotent_function`` over
``DynamoDBPersistenceLayer`` wrapping the same pledge write.

    python bench/intake.py [--pledges N] [--rounds R] [--rtt-ms MS] [--write]

Each variant runs R rounds, interleaved (service, raw, powertools, service, …) after a
warm-up, so drift on a noisy machine hits all of them alike; medians are compared as
ratios within one run. The whole comparison runs twice: straight over loopback, and
through a proxy that adds a modelled network round trip.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import uuid
from datetime import UTC, datetime

from _common import (
    LatencyProxy,
    RoundTrips,
    machine_line,
    median,
    start_engine,
    timed,
    write_section,
)

BODY = {"donor_ref": "D-1", "fund": "BENCH", "amount": "10.00", "currency": "USD"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pledges", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--rtt-ms", type=float, default=4.0)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    engine = start_engine()
    try:
        from django.conf import settings

        from reconciliation.dynamo.client import reset_clients

        direct = run(args, "direct")
        proxy = LatencyProxy(engine.port, args.rtt_ms / 2)
        settings.DYNAMODB_ENDPOINT_URL = proxy.endpoint_url
        reset_clients()
        modelled = run(args, "rtt")
    finally:
        engine.stop()
    report = "\n".join(
        [
            "## Intake (`bench/intake.py`)",
            "",
            f"DynamoDB Local 3.3.1, one client thread, {args.pledges} pledges × "
            f"{args.rounds} interleaved rounds after {args.warmup} warm-up pledges per "
            f"variant, medians; {machine_line()}. Round trips are HTTP requests counted on "
            "the client (SDK retries included). Every variant writes the same items "
            "(pledge, ledger shard, audit receipt; claim for service and raw, Powertools' "
            "own record for Powertools); only the code around the calls differs.",
            "",
            "### Loopback, no network latency",
            "",
            direct,
            "",
            f"### Through a proxy adding {args.rtt_ms:g} ms per round trip",
            "",
            "Over loopback DynamoDB Local's own engine time (a transaction costs it several "
            "milliseconds) hides what a round trip costs against a real endpoint, where "
            "latency dominates. This run puts a loopback proxy that delays each direction "
            f"by {args.rtt_ms / 2:g} ms between the client and the engine.",
            "",
            modelled,
        ]
    )
    print(report)
    if args.write:
        write_section("intake", report)


def _iso_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _business_items(tables, intent: str, token: str, at: str, tenant: str) -> list[dict]:
    """Pledge Put, ledger Update and audit receipt Put, hand-built as the service builds them."""
    from reconciliation.dynamo.tables import ack_shard, donor_search_key, subject_day_shard

    event_id = str(uuid.uuid4())
    pledge_fields = {
        "intent_id": intent,
        "donor_ref": "D-1",
        "fund": "BENCH",
        "amount": "10.00",
        "currency": "USD",
        "status": "RECORDED",
        "created_at": at,
        "ledger_key": "BENCH#USD#0",
    }
    event = {
        "stream": f"PLEDGE#{intent}",
        "seq": 1,
        "event_id": event_id,
        "at": at,
        "day_shard": at[:10] + "#0",
        "at_id": f"{at}#{event_id}",
        "actor": {"username": f"api:{tenant}", "email": "", "role": "api"},
        "client_address": "127.0.0.1",
        "correlation_id": event_id,
        "action": "pledge_recorded",
        "intent_id": intent,
        "after": pledge_fields,
        "prev_hash": "0" * 64,
    }
    digest = hashlib.sha256(
        json.dumps(event, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    receipt = {
        "stream": {"S": event["stream"]},
        "seq": {"N": "1"},
        "event_id": {"S": event_id},
        "at": {"S": at},
        "day_shard": {"S": event["day_shard"]},
        "at_id": {"S": event["at_id"]},
        "actor": {
            "M": {"username": {"S": f"api:{tenant}"}, "email": {"S": ""}, "role": {"S": "api"}}
        },
        "client_address": {"S": "127.0.0.1"},
        "correlation_id": {"S": event_id},
        "action": {"S": "pledge_recorded"},
        "intent_id": {"S": intent},
        "after": {"M": {k: {"S": v} for k, v in pledge_fields.items()}},
        "prev_hash": {"S": "0" * 64},
        "hash": {"S": digest},
    }
    pledge = {
        "intent_id": {"S": intent},
        "tenant": {"S": tenant},
        "donor_ref": {"S": "D-1"},
        "fund": {"S": "BENCH"},
        "amount": {"N": "10.00"},
        "currency": {"S": "USD"},
        "status": {"S": "RECORDED"},
        "request_token": {"S": token},
        "created_at": {"S": at},
        "ledger_key": {"S": "BENCH#USD#0"},
        "audit_seq": {"N": "1"},
        "audit_head": {"S": digest},
        # The keys of the pledges table's three indexes, as the service writes them
        # (`PledgeRepository.put_item` in reconciliation/claims/pledges.py): DynamoDB
        # keeps an entry in each.
        "day_shard": {"S": subject_day_shard(intent, at)},
        "ack_shard": {"S": ack_shard(intent)},
        "ack_due_at": {"N": str(int(datetime.fromisoformat(at).timestamp()))},
        "donor_key": {"S": donor_search_key("D-1")},
    }
    return [
        {
            "Put": {
                "TableName": tables.pledges,
                "Item": pledge,
                "ConditionExpression": "attribute_not_exists(intent_id)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "Update": {
                "TableName": tables.ledger,
                "Key": {"fund": {"S": "BENCH#USD#0"}},
                "UpdateExpression": "ADD pledged_total :amount, pledge_count :count "
                "SET fund_code = :fund, currency = :cur",
                "ExpressionAttributeValues": {
                    ":amount": {"N": "10.00"},
                    ":count": {"N": "1"},
                    ":fund": {"S": "BENCH"},
                    ":cur": {"S": "USD"},
                },
            }
        },
        {
            "Put": {
                "TableName": tables.audit_events,
                "Item": receipt,
                "ConditionExpression": "attribute_not_exists(seq)",
            }
        },
    ]


def run(args, label: str) -> str:
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    from reconciliation.actors import Actor, Role
    from reconciliation.claims.intake import pledge_submit
    from reconciliation.claims.models import pledge_home
    from reconciliation.claims.outcomes import OutcomeKind
    from reconciliation.claims.request import parse_fields
    from reconciliation.dynamo.client import dynamodb_client, table_names

    client = dynamodb_client()
    tables = table_names()
    trips = RoundTrips(client)
    actor = Actor(username="api:bench", role=Role.API, address="127.0.0.1")
    request = parse_fields(BODY)

    # (b) Powertools: its own record, then the business transaction, then COMPLETED.
    if "bench-powertools" not in client.list_tables()["TableNames"]:
        client.create_table(
            TableName="bench-powertools",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    layer = DynamoDBPersistenceLayer(table_name="bench-powertools", boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=3600)

    @idempotent_function(data_keyword_argument="pledge", persistence_store=layer, config=config)
    def powertools_write(pledge: dict) -> dict:
        intent = f"pt#{pledge['key']}"
        token = str(uuid.uuid4())
        client.transact_write_items(
            TransactItems=_business_items(tables, intent, token, _iso_now(), "pt"),
            ClientRequestToken=token,
        )
        return {"intent_id": pledge["key"], "amount": "10.00"}

    # (a) raw boto3: the same two calls with the same items, hand-built (bench/_http_raw.py;
    # imported here, as it takes this module's items).
    from _http_raw import raw_write as raw_calls

    def raw_write(key: str) -> str:
        return raw_calls(client, tables, key)

    def service_write(key: str) -> str:
        return pledge_submit(
            pledge_home("bench", key),
            tenant="bench",
            idempotency_key=key,
            request=request,
            actor=actor,
        ).kind

    variants = {
        "service layer": (service_write, OutcomeKind.CREATED, OutcomeKind.REPLAYED),
        "raw boto3": (raw_write, "CREATED", "COMPLETED"),
        "Powertools idempotent_function": (
            lambda key: powertools_write(pledge={"key": key, **BODY}),
            None,
            None,
        ),
    }
    results = {
        name: {"new": [], "replay": [], "trips_new": [], "trips_replay": []} for name in variants
    }
    n = args.pledges
    # Warm the JVM and the connection pool for every variant before anything is timed.
    for name, (write, _created, _replayed) in variants.items():
        for i in range(args.warmup):
            write(f"{label}-warm-{name[:3]}-{i}")
            write(f"{label}-warm-{name[:3]}-{i}")
    for round_no in range(args.rounds):
        for name, (write, created, replayed) in variants.items():
            keys = [f"{label}-{name[:3]}-{round_no}-{i}" for i in range(n)]
            for phase, expected in (("new", created), ("replay", replayed)):
                start = trips.count
                outcomes: list[str] = []
                elapsed = timed(
                    lambda keys=keys, write=write, outcomes=outcomes: outcomes.extend(
                        write(k) for k in keys
                    )
                )
                if expected is not None:
                    assert set(outcomes) == {expected}, set(outcomes)
                results[name][phase].append(n / elapsed)
                results[name][f"trips_{phase}"].append((trips.count - start) / n)

    med = {name: {k: median(v) for k, v in r.items()} for name, r in results.items()}
    svc, raw = med["service layer"], med["raw boto3"]
    pt = med["Powertools idempotent_function"]
    rows = [
        f"| {name} | {r['new']:.0f} | {r['trips_new']:.2f} | {r['replay']:.0f} | "
        f"{r['trips_replay']:.2f} |"
        for name, r in med.items()
    ]
    overhead_new = raw["new"] / svc["new"] - 1
    overhead_replay = raw["replay"] / svc["replay"] - 1
    vs_pt = svc["new"] / pt["new"]
    checks = [
        ("new pledge = 2 round trips", svc["trips_new"] == 2.0, f"{svc['trips_new']:.2f}"),
        ("replay = 1 round trip", svc["trips_replay"] == 1.0, f"{svc['trips_replay']:.2f}"),
        ("service overhead vs raw boto3 ≤ 20% (new)", overhead_new <= 0.20, f"{overhead_new:+.1%}"),
        (
            "service overhead vs raw boto3 ≤ 20% (replay)",
            overhead_replay <= 0.20,
            f"{overhead_replay:+.1%}",
        ),
        ("new-pledge throughput ≥ 1.3× Powertools", vs_pt >= 1.3, f"{vs_pt:.2f}×"),
    ]
    return "\n".join(
        [
            "| variant | new pledges/s | round trips/new | replays/s | round trips/replay |",
            "| --- | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            "| target | met | measured |",
            "| --- | --- | --- |",
            *(f"| {text} | {'yes' if ok else 'NO'} | {value} |" for text, ok, value in checks),
        ]
    )


if __name__ == "__main__":
    os.environ.setdefault("DDB_TABLE_PREFIX", "bench-")
    main()
