"""A webhook receiver for development and tests (``webhook_sink``, docs/webhooks.md).

It verifies each delivery's signature with the ``standardwebhooks`` library against
every secret it is given (``--secret`` more than once, and ``--secret-file``, read again
whenever the file changes: a rotation needs no restart; :class:`SinkSecrets`), processes
each ``webhook-id`` once (a repeat is counted as a duplicate and answered 200), and
counts what it saw. Told to, it misbehaves *after* processing: answers 500, never
answers in time (the sender's read timeout fires: a lost answer), or answers slowly; or
never answers and does not process (the delivery lost before the receiver applied it).
It misbehaves on every delivery (``--misbehave``) or at random, per delivery, at given
rates drawn from a seeded generator (``--fail-rate`` …, the reliability run's faults).
``GET /stats`` returns the counts as JSON, with the requests it holds open right now
(``in_flight``: a sender is mid-send); ``GET /stats/brief`` the counts alone.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
)


class Misbehaviour(StrEnum):
    NONE = "none"
    ERROR_500 = "500"  # process, then answer 500
    TIMEOUT = "timeout"  # process, then hold the answer past the sender's read timeout
    SLOW = "slow"  # process, then answer 200 after a delay
    # Hold the answer past the sender's read timeout *without* processing: the delivery
    # was lost before the receiver applied it.
    TIMEOUT_BEFORE = "timeout-before"


@dataclass(frozen=True)
class FaultRates:
    """Misbehaviour at random, per delivery: each rate is a probability, drawn once per
    delivery from the sink's seeded generator, so a seed replays the same answers."""

    fail: float = 0.0  # process, then answer 500
    timeout_after: float = 0.0  # process, then never answer in time (a lost answer)
    timeout_before: float = 0.0  # never answer in time, and do not process

    def __post_init__(self) -> None:
        rates = (self.fail, self.timeout_after, self.timeout_before)
        if any(not 0 <= rate <= 1 for rate in rates) or sum(rates) > 1:
            raise ValueError("each rate must lie in [0, 1] and together they at most 1")

    def draw(self, rng: random.Random) -> Misbehaviour:
        """One delivery's misbehaviour: one uniform draw split among the rates."""
        draw = rng.random()
        for rate, misbehave in (
            (self.timeout_before, Misbehaviour.TIMEOUT_BEFORE),
            (self.timeout_after, Misbehaviour.TIMEOUT),
            (self.fail, Misbehaviour.ERROR_500),
        ):
            if draw < rate:
                return misbehave
            draw -= rate
        return Misbehaviour.NONE


@dataclass
class SinkSecrets:
    """The secrets a receiver accepts: those it was ``given`` and, one a line, those in
    ``file``, read again whenever the file changes (its inode, size or modification
    time), so an operator rotating the endpoint (docs/webhooks.md) writes the new secret
    beside the old one, and later removes the old one, without restarting it. A file that
    cannot be read at that moment (being replaced) leaves the secrets last read."""

    given: tuple[str, ...] = ()
    file: Path | None = None
    _read: tuple[str, ...] = field(default=(), init=False, repr=False)
    _stamp: tuple[int, int, int] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def current(self) -> tuple[str, ...]:
        if self.file is None:
            return self.given
        with self._lock:
            try:
                stat = self.file.stat()
                # The inode too: a file replaced whole (written beside, renamed over) may
                # keep the size and land in the same mtime tick.
                stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
                if stamp != self._stamp:
                    lines = self.file.read_text().splitlines()
                    self._read = tuple(line.strip() for line in lines if line.strip())
                    self._stamp = stamp
            except OSError:
                pass
            return self.given + self._read


@dataclass
class SinkState:
    # Accepted: ``secret`` (one, given alone) and every one of ``secrets``.
    secret: str = ""
    secrets: SinkSecrets = field(default_factory=SinkSecrets)
    misbehave: Misbehaviour = Misbehaviour.NONE
    # Misbehave on this many deliveries, then behave (0: on every one).
    misbehave_count: int = 0
    delay_s: float = 30.0
    # Random misbehaviour, for deliveries the fixed ``misbehave`` leaves alone.
    rates: FaultRates = field(default_factory=FaultRates)
    rng: random.Random = field(default_factory=random.Random)
    deliveries: int = 0
    duplicates: int = 0
    rejected: int = 0
    processed: list[str] = field(default_factory=list)
    ids_seen: list[str] = field(default_factory=list)
    events: dict[str, Any] = field(default_factory=dict)
    # When each processed event first arrived (epoch seconds): commit-to-receipt latency.
    received_at: dict[str, float] = field(default_factory=dict)
    misbehaved: Counter[str] = field(default_factory=Counter)
    # Requests received and not yet answered: ticket -> (webhook-id, monotonic arrival).
    in_flight: dict[int, tuple[str, float]] = field(default_factory=dict)
    tickets: itertools.count[int] = field(default_factory=itertools.count)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stats(self, *, brief: bool = False) -> dict[str, Any]:
        """The counts; without ``brief`` also every id and payload (``GET /stats``), with
        it only the counts and the open requests (``GET /stats/brief``, cheap to poll)."""
        with self.lock:
            now = time.monotonic()
            counts = {
                "deliveries": self.deliveries,
                "duplicates": self.duplicates,
                "rejected": self.rejected,
                "processed_count": len(self.processed),
                "misbehaved": dict(self.misbehaved),
                "in_flight": [
                    {"id": event_id, "age_s": round(now - since, 3)}
                    for event_id, since in self.in_flight.values()
                ],
            }
            if brief:
                return counts
            return {
                **counts,
                "processed": list(self.processed),
                "ids_seen": list(self.ids_seen),
                "events": dict(self.events),
                "received_at": dict(self.received_at),
            }

    def arrived(self, event_id: str) -> int:
        """A request is open (the sender is mid-send): its ticket for :meth:`answered`."""
        with self.lock:
            ticket = next(self.tickets)
            self.in_flight[ticket] = (event_id, time.monotonic())
            return ticket

    def answered(self, ticket: int) -> None:
        with self.lock:
            self.in_flight.pop(ticket, None)

    def verified(self, body: bytes, headers: dict[str, str]) -> Any | None:
        """The payload, if the signature header holds a valid signature by any accepted
        secret (the library checks each ``v1,…`` of the header against one secret), else
        ``None``."""
        for key in ((self.secret,) if self.secret else ()) + self.secrets.current():
            try:
                return Webhook(key).verify(body, headers)
            except (WebhookVerificationError, EmptyWebhookSecretError, ValueError):
                continue  # not signed by this one (or a malformed line in the file)
        return None

    def receive(self, body: bytes, headers: dict[str, str]) -> tuple[int, Misbehaviour]:
        """Verify and process one delivery; the status to answer and how to misbehave."""
        payload = self.verified(body, headers)
        if payload is None:
            with self.lock:
                self.rejected += 1
            return 400, Misbehaviour.NONE
        event_id = headers.get("webhook-id", "")
        with self.lock:
            misbehave = self.misbehave
            if self.misbehave_count:
                self.misbehave_count -= 1
                if self.misbehave_count == 0:
                    self.misbehave = Misbehaviour.NONE
            if misbehave == Misbehaviour.NONE:
                misbehave = self.rates.draw(self.rng)
            if misbehave != Misbehaviour.NONE:
                self.misbehaved[misbehave] += 1
            self.deliveries += 1
            self.ids_seen.append(event_id)
            if misbehave == Misbehaviour.TIMEOUT_BEFORE:
                pass  # lost before processing: neither processed nor a duplicate
            elif event_id in self.events:
                self.duplicates += 1
            else:
                # Processing is the receiver's side effect: done once per webhook-id.
                self.events[event_id] = payload
                self.processed.append(event_id)
                self.received_at[event_id] = time.time()
        return 200, misbehave


def sink_server(state: SinkState, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        # Keep-alive, as a production receiver does: a dispatcher's connection carries
        # one POST after another (every answer has its content-length).
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as production servers set it: an answer goes out as its headers
        # and then its body, and with Nagle's algorithm the body waited for the
        # sender's delayed ACK of the headers (about 88 ms a POST on loopback, which
        # held one endpoint's 8 requests in flight to about 90 answers a second).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/stats":
                self._answer(200, state.stats())
            elif self.path == "/stats/brief":
                self._answer(200, state.stats(brief=True))
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            ticket = state.arrived(headers.get("webhook-id", ""))
            try:
                status, misbehave = state.receive(body, headers)
                if misbehave in (Misbehaviour.TIMEOUT, Misbehaviour.TIMEOUT_BEFORE):
                    time.sleep(state.delay_s)
                    self.close_connection = True
                    return  # the answer is lost: the sender has given up by now
                if misbehave == Misbehaviour.SLOW:
                    time.sleep(state.delay_s)
                if misbehave == Misbehaviour.ERROR_500:
                    status = 500
                self._answer(status, {"received": status < 300})
            finally:
                state.answered(ticket)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
