"""One POST of an event to an endpoint, signed with the ``standardwebhooks`` library.

The connection goes to the address the check resolved (not a second lookup, which could
answer differently), with a connect timeout and then a read timeout on the answer.
:func:`post` opens a connection per POST; :class:`KeepAlive` (the dispatcher's) keeps
connections open per endpoint address, so a busy endpoint costs no handshake a POST.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, replace
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
        connection = _connect(target, connect_timeout_s, read_timeout_s)
    except OSError as exc:
        return AttemptResult(None, f"connect: {type(exc).__name__}")
    try:
        return _exchange(connection, target, headers, body)[0]
    finally:
        connection.close()


def _connect(
    target: Target, connect_timeout_s: float, read_timeout_s: float
) -> http.client.HTTPConnection:
    """A connection to the checked address (never a second lookup of the host), its
    socket's timeout the read timeout from then on; ``OSError`` when none is made."""
    sock = socket.create_connection((target.address, target.port), timeout=connect_timeout_s)
    try:
        sock.settimeout(read_timeout_s)
        # http.client sends a request's headers and its body in two writes: with Nagle's
        # algorithm the body waits for the receiver's delayed ACK of the headers (40 ms
        # and more a POST, which capped one endpoint's 8 in flight near 90 a second).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection: http.client.HTTPConnection
        if target.scheme == "https":
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=target.host)
            connection = http.client.HTTPSConnection(target.host, target.port)
        else:
            connection = http.client.HTTPConnection(target.host, target.port)
    except BaseException:
        sock.close()
        raise
    connection.sock = sock
    return connection


# An answer's body longer than this is not read to its end: the connection is closed.
ANSWER_READ_BYTES = 65536


def _exchange(
    connection: http.client.HTTPConnection,
    target: Target,
    headers: dict[str, str],
    body: bytes,
) -> tuple[AttemptResult, bool]:
    """One request on ``connection``: what was heard, and whether the connection may carry
    another (the answer read to its end, and neither side asked to close)."""
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(ANSWER_READ_BYTES)
        # Read to its end (the response closed itself) and no "Connection: close".
        return AttemptResult(response.status), response.isclosed() and not response.will_close
    except TimeoutError:
        return AttemptResult(None, "read timeout: the answer did not come in time"), False
    except (OSError, http.client.HTTPException) as exc:
        return AttemptResult(None, f"{type(exc).__name__}"), False


# An idle connection older than this is closed rather than used: receivers close theirs
# after a few seconds (5 s in many servers), and a POST on a closed one is a wasted try.
IDLE_S = 4.0
# Idle connections kept per address at most (the endpoint's requests in flight reuse
# them; more would only hold the receiver's sockets).
IDLE_PER_ADDRESS = 32


@dataclass
class _Idle:
    connection: http.client.HTTPConnection
    since: float


class KeepAlive:
    """A sender (``post``'s signature) that keeps connections alive per address: each
    POST takes an idle connection to the target's checked address, or opens one, and
    gives it back when the answer allows. A reused connection the receiver closed
    meanwhile fails before any answer; that POST is sent once more on a new connection
    (a repeat carries the same ``webhook-id``, so a receiver applies it once). Thread-safe:
    the dispatcher's workers share one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, str, int, str], list[_Idle]] = defaultdict(list)
        self.opened = 0  # connections made, for tests and the bench

    def __call__(
        self,
        target: Target,
        *,
        headers: dict[str, str],
        body: bytes,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> AttemptResult:
        started = time.perf_counter()
        result = self._post(target, headers, body, connect_timeout_s, read_timeout_s)
        return replace(result, duration_ms=(time.perf_counter() - started) * 1000)

    def _post(
        self,
        target: Target,
        headers: dict[str, str],
        body: bytes,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> AttemptResult:
        key = (target.scheme, target.host, target.port, target.address)
        connection = self._take(key)
        if connection is not None:
            connection.sock.settimeout(read_timeout_s)
            result, reusable = _exchange(connection, target, headers, body)
            if result.code is not None or "timeout" in result.error:
                return self._after(key, connection, result, reusable)
            connection.close()  # closed by the receiver while idle: once more, fresh
        try:
            connection = _connect(target, connect_timeout_s, read_timeout_s)
        except OSError as exc:
            return AttemptResult(None, f"connect: {type(exc).__name__}")
        with self.lock:
            self.opened += 1
        result, reusable = _exchange(connection, target, headers, body)
        return self._after(key, connection, result, reusable)

    def _take(self, key: tuple[str, str, int, str]) -> http.client.HTTPConnection | None:
        now = time.monotonic()
        stale: list[_Idle] = []
        found = None
        with self.lock:
            pool = self.idle[key]
            while pool:
                idle = pool.pop()
                if now - idle.since < IDLE_S:
                    found = idle.connection
                    break
                stale.append(idle)
        for idle in stale:
            idle.connection.close()
        return found

    def _after(
        self,
        key: tuple[str, str, int, str],
        connection: http.client.HTTPConnection,
        result: AttemptResult,
        reusable: bool,
    ) -> AttemptResult:
        if reusable:
            with self.lock:
                pool = self.idle[key]
                if len(pool) < IDLE_PER_ADDRESS:
                    pool.append(_Idle(connection, time.monotonic()))
                    return result
        connection.close()
        return result

    def close(self) -> None:
        with self.lock:
            idle = [i for pool in self.idle.values() for i in pool]
            self.idle.clear()
        for i in idle:
            i.connection.close()
