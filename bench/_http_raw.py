"""The raw-boto3 side of the HTTP bench: the DynamoDB calls intake makes for one pledge
(reconciliation/claims/intake.py), hand-built, on a plain client with the project's
client configuration (timeouts, retries, pool, no client-side validation) and none of
its hooks. The items are the service's too (the pledge's index keys, the claim's cached
answer), so DynamoDB does the same work for both sides and the ratio measures the HTTP
stack alone."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

from intake import BODY, _business_items, _iso_now


def raw_client(endpoint_url: str):
    import boto3

    from reconciliation.dynamo.client import client_config

    return boto3.session.Session().client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=client_config(),
    )


def raw_write(client, tables, key: str) -> str:
    """A new key: the claim PutItem, then the commit TransactWriteItems with its request
    log entry ("CREATED"). A
    committed key: the claim PutItem, refused, with the stored claim in the same round
    trip (its status, "COMPLETED")."""
    from reconciliation.claims.ledger import ledger_key_for

    pk = f"raw#create_pledge#{key}"
    intent = f"raw#{key}"
    payload = json.dumps(BODY, sort_keys=True, separators=(",", ":"))
    payload_hash = hashlib.sha256(payload.encode()).hexdigest()
    token, attempt, at = str(uuid.uuid4()), str(uuid.uuid4()), _iso_now()
    expires = int(time.time()) + 60
    try:
        client.put_item(
            TableName=tables.idempotency_keys,
            Item={
                "pk": {"S": pk},
                "status": {"S": "PENDING"},
                "version": {"N": "1"},
                "attempt_id": {"S": attempt},
                "payload_hash": {"S": payload_hash},
                "request_token": {"S": token},
                "token_issued_at": {"S": at},
                "created_at": {"S": at},
                "claimed_at": {"S": at},
                "expires_at": {"N": str(expires)},
                "purge_at": {"N": str(expires + 604800)},
                "tenant": {"S": "raw"},
                "idempotency_key": {"S": key},
                "intent_id": {"S": intent},
                "request": {"S": payload},
                "correlation_id": {"S": attempt},
                "client_address": {"S": "203.0.113.7"},
                "pending_shard": {"S": "P#1"},
                "pledge_version": {"S": "2026-12-01"},
            },
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except client.exceptions.ConditionalCheckFailedException as exc:
        return exc.response["Item"]["status"]["S"]
    # The cached answer is the whole pledge, as the API answers it.
    response = json.dumps(
        {"intent_id": key, **BODY, "status": "RECORDED", "created_at": at}, sort_keys=True
    )
    complete = {
        "Update": {
            "TableName": tables.idempotency_keys,
            "Key": {"pk": {"S": pk}},
            "UpdateExpression": "SET #st = :done, version = :next, #resp = :resp, "
            "expires_at = :exp, completed_at = :at REMOVE pending_shard",
            "ConditionExpression": "#st = :pending AND version = :v",
            "ExpressionAttributeNames": {"#st": "status", "#resp": "response"},
            "ExpressionAttributeValues": {
                ":done": {"S": "COMPLETED"},
                ":next": {"N": "2"},
                ":resp": {"S": response},
                ":exp": {"N": str(expires)},
                ":at": {"S": at},
                ":pending": {"S": "PENDING"},
                ":v": {"N": "1"},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }
    business = _business_items(tables, intent, token, at, "raw")
    # The ledger shard the service would pick (LEDGER_SHARDS), not one hot item.
    shard = ledger_key_for("BENCH", "USD", intent)
    business[0]["Put"]["Item"]["ledger_key"] = {"S": shard}
    business[1]["Update"]["Key"] = {"fund": {"S": shard}}
    # The request log's entry for the 201, as the service's commit carries it: the same
    # calls on both sides.
    log = {
        "Put": {
            "TableName": tables.requests,
            "Item": {
                "subject": {"S": f"KEY#raw#{key}"},
                "at_id": {"S": f"{at}#{attempt}"},
                "tenant": {"S": "raw"},
                "idempotency_key": {"S": key},
                "at": {"S": at},
                "outcome": {"S": "created"},
                "replayed": {"BOOL": False},
                "correlation_id": {"S": attempt},
                "request_id": {"S": attempt},
                "donor_ref": {"S": BODY["donor_ref"]},
                "purge_at": {"N": str(expires + 2592000)},
            },
        }
    }
    client.transact_write_items(
        TransactItems=[*business, complete, log],
        ClientRequestToken=token,
    )
    return "CREATED"
