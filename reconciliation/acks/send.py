"""One POST of an event to an endpoint, signed with the ``standardwebhooks`` library.

The connection goes to the address the check resolved (not a second lookup, which could
answer differently), with a connect timeout and then a read timeout on the answer.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import replace
from datetime import datetime

from standardwebhooks.webhooks import Webhook

from reconciliation.acks.addresses import Target
from reconciliation.acks.models import AttemptResult


def signed_headers(
    *,
    secret: str,
    event_id: str,
    at: datetime,
    body: bytes,
    previous_secret: str | None = None,
) -> dict[str, str]:
    """The Standard Webhooks headers for ``body``, signed by the library. With
    ``previous_secret`` (a rotation's, still valid) it is signed with both, the new
    signature first: ``v1,<new> v1,<old>``, space-separated as the specification says,
    so a receiver that still knows only the old secret verifies too."""
    signature = " ".join(
        Webhook(key).sign(msg_id=event_id, timestamp=at, data=body)
        for key in (secret, previous_secret)
        if key
    )
    return {
        "content-type": "application/json",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
    }


def post(
    target: Target,
    *,
    headers: dict[str, str],
    body: bytes,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> AttemptResult:
    """POST ``body`` to ``target``; the status heard, or why none was heard, and how long
    it took."""
    started = time.perf_counter()
    result = _post(
        target,
        headers=headers,
        body=body,
        connect_timeout_s=connect_timeout_s,
        read_timeout_s=read_timeout_s,
    )
    return replace(result, duration_ms=(time.perf_counter() - started) * 1000)


def _post(
    target: Target,
    *,
    headers: dict[str, str],
    body: bytes,
    connect_timeout_s: float,
    read_timeout_s: float,
) -> AttemptResult:
    try:
        sock = socket.create_connection((target.address, target.port), timeout=connect_timeout_s)
    except OSError as exc:
        return AttemptResult(None, f"connect: {type(exc).__name__}")
    try:
        sock.settimeout(read_timeout_s)
        connection: http.client.HTTPConnection
        if target.scheme == "https":
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=target.host)
            connection = http.client.HTTPSConnection(target.host, target.port)
        else:
            connection = http.client.HTTPConnection(target.host, target.port)
        connection.sock = sock
        try:
            connection.request("POST", target.path, body=body, headers=headers)
            response = connection.getresponse()
            response.read(4096)
            return AttemptResult(response.status)
        finally:
            connection.close()
    except TimeoutError:
        return AttemptResult(None, "read timeout: the answer did not come in time")
    except (OSError, http.client.HTTPException) as exc:
        return AttemptResult(None, f"{type(exc).__name__}")
    finally:
        sock.close()
