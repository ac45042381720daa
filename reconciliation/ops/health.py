"""Reachability of the system's dependencies, for ``/healthz`` and ``make run``, and
whether this process's configuration is the one recorded (``config``).

``/healthz`` is anonymous, so each entry names a component and its state only
(``ok``, ``error: unreachable``, ``error: tables missing`` …), never an endpoint URL,
host or credential: ``REDIS_URL`` may carry the Redis password. The detail an operator
needs (which endpoint, which exception) goes to the server log, the password masked.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import redis
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from django.conf import settings

from reconciliation.dynamo.client import dynamodb_client, regions, table_names
from reconciliation.dynamo.errors import describe_connection_problem, error_code
from reconciliation.ops.config import config_compare, config_summary

logger = logging.getLogger(__name__)


def dynamodb_status() -> str:
    names = table_names()
    for region in regions():
        try:
            dynamodb_client(region).describe_table(TableName=names.idempotency_keys)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                logger.warning("health: DynamoDB tables missing in region %s", region.name)
                return "error: tables missing"
            logger.warning("health: %s", describe_connection_problem(exc, region))
            # An error code (AccessDeniedException…) names a state, not a place.
            return f"error: {error_code(exc)}"
        except BotoCoreError as exc:
            logger.warning("health: %s", describe_connection_problem(exc, region))
            return f"error: {_botocore_state(exc)}"
    return "ok"


def _botocore_state(exc: BotoCoreError) -> str:
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return "unreachable"
    if isinstance(exc, NoCredentialsError):
        return "no credentials"
    if isinstance(exc, ReadTimeoutError):
        return "timeout"
    return "failed"


def redis_status() -> str:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        client.ping()
    except redis.RedisError as exc:
        refused = isinstance(exc, redis.AuthenticationError)
        logger.warning(
            "health: Redis %s at %s (%s)",
            "refused the credentials" if refused else "unreachable",
            redacted_url(settings.REDIS_URL),
            exc.__class__.__name__,
        )
        return "error: authentication failed" if refused else "error: unreachable"
    return "ok"


def redacted_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        netloc = f"{user}:***@{host}{port}"
    except ValueError:
        return "<unparseable URL>"
    return urlunsplit(parts._replace(netloc=netloc))


def config_status() -> str:
    """``ok``, ``not recorded``, ``differs (fields)`` or ``not checked``: this process's
    configuration against the one recorded in every region (reconciliation/ops/config.py)."""
    return config_summary(config_compare())


def health_check() -> dict[str, str]:
    dynamodb = dynamodb_status()
    # With DynamoDB down the record cannot be read: say so without waiting on it again.
    config = config_status() if dynamodb == "ok" else "not checked"
    return {"dynamodb": dynamodb, "redis": redis_status(), "config": config}


def healthy(status: dict[str, str]) -> bool:
    """Every dependency ``ok``, and a configuration that does not differ: one not yet
    recorded (a fresh table) is no reason to take a process out of service."""
    return all(
        value == "ok" or (name == "config" and not value.startswith("differs"))
        for name, value in status.items()
    )
