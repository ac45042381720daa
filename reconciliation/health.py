"""Reachability of the system's dependencies, for ``/healthz`` and ``make run``."""

from __future__ import annotations

import redis
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from reconciliation.dynamo.client import dynamodb_client, regions, table_names
from reconciliation.dynamo.errors import describe_connection_problem


def dynamodb_status() -> str:
    names = table_names()
    for region in regions():
        try:
            dynamodb_client(region).describe_table(TableName=names.idempotency_keys)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                return "error: tables missing; run `python manage.py ddb_setup`"
            return "error: " + describe_connection_problem(exc, region)
        except BotoCoreError as exc:
            return "error: " + describe_connection_problem(exc, region)
    return "ok"


def redis_status() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        client.ping()
    except redis.RedisError as exc:
        return f"error: Redis unreachable at {settings.REDIS_URL} ({exc.__class__.__name__})"
    return "ok"


def health_check() -> dict[str, str]:
    return {"dynamodb": dynamodb_status(), "redis": redis_status()}
