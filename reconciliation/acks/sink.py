"""A webhook receiver for development and tests (``webhook_sink``, docs/webhooks.md).

It verifies each delivery's signature with the ``standardwebhooks`` library, processes
each ``webhook-id`` once (a repeat is counted as a duplicate and answered 200), and
counts what it saw. Told to, it misbehaves *after* processing: answers 500, never
answers in time (the sender's read timeout fires: a lost answer), or answers slowly.
``GET /stats`` returns the counts as JSON.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class Misbehaviour(StrEnum):
    NONE = "none"
    ERROR_500 = "500"  # process, then answer 500
    TIMEOUT = "timeout"  # process, then hold the answer past the sender's read timeout
    SLOW = "slow"  # process, then answer 200 after a delay


@dataclass
class SinkState:
    secret: str
    misbehave: Misbehaviour = Misbehaviour.NONE
    # Misbehave on this many deliveries, then behave (0: on every one).
    misbehave_count: int = 0
    delay_s: float = 30.0
    deliveries: int = 0
    duplicates: int = 0
    rejected: int = 0
    processed: list[str] = field(default_factory=list)
    ids_seen: list[str] = field(default_factory=list)
    events: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "deliveries": self.deliveries,
                "duplicates": self.duplicates,
                "rejected": self.rejected,
                "processed": list(self.processed),
                "ids_seen": list(self.ids_seen),
                "events": dict(self.events),
            }

    def receive(self, body: bytes, headers: dict[str, str]) -> tuple[int, Misbehaviour]:
        """Verify and process one delivery; the status to answer and how to misbehave."""
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            with self.lock:
                self.rejected += 1
            return 400, Misbehaviour.NONE
        event_id = headers.get("webhook-id", "")
        with self.lock:
            self.deliveries += 1
            self.ids_seen.append(event_id)
            if event_id in self.events:
                self.duplicates += 1
            else:
                # Processing is the receiver's side effect: done once per webhook-id.
                self.events[event_id] = payload
                self.processed.append(event_id)
            misbehave = self.misbehave
            if self.misbehave_count:
                self.misbehave_count -= 1
                if self.misbehave_count == 0:
                    self.misbehave = Misbehaviour.NONE
        return 200, misbehave


def sink_server(state: SinkState, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
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
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, misbehave = state.receive(body, headers)
            if misbehave == Misbehaviour.TIMEOUT:
                time.sleep(state.delay_s)
                return  # the answer is lost: the sender has given up by now
            if misbehave == Misbehaviour.SLOW:
                time.sleep(state.delay_s)
            if misbehave == Misbehaviour.ERROR_500:
                status = 500
            self._answer(status, {"received": status < 300})

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
