"""The dispatcher's side of the wake-up (reconciliation/claims/ack_wakeup.py): wait for a
commit's message, or for the poll interval, whichever comes first.

The poll stays the safety net: every ``ACK_POLL_S`` a pass looks at every shard whatever
the messages said, so a message lost (Redis down, a dispatcher subscribing late) costs
latency only. A woken pass looks at the woken shards only, and once more shortly after
(``INDEX_LAG_S``): a global secondary index may show an item a moment after its write.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from django.conf import settings

from reconciliation.claims.ack_wakeup import ack_wake_channel

logger = logging.getLogger(__name__)

# How often a waiting dispatcher looks whether it was asked to stop.
STOP_LOOK_S = 0.1
# A woken shard is queried again this much later (the index may lag its table).
INDEX_LAG_S = 0.3
# After Redis failed, the dispatcher polls only, and tries to subscribe again this later.
RESUBSCRIBE_S = 5.0


@dataclass(frozen=True)
class Wake:
    """What the next pass looks at: ``shards`` woken, or every shard (``None``)."""

    shards: frozenset[str] | None


class Wakeups:
    """A subscription to the wake-up channel, kept across waits."""

    def __init__(self, url: str | None = None, *, poll_s: float | None = None):
        self.url = url or settings.REDIS_URL
        self.poll_s = settings.ACK_POLL_S if poll_s is None else poll_s
        self.client: redis.Redis | None = None
        self.pubsub: redis.client.PubSub | None = None
        self.retry_at = 0.0
        self.last_full = time.monotonic()
        self.again: tuple[float, frozenset[str]] | None = None

    def subscribe(self) -> bool:
        """Subscribe now (else at the first wait): whether Redis took it."""
        return self._subscription() is not None

    def _subscription(self) -> redis.client.PubSub | None:
        if self.pubsub is None and time.monotonic() >= self.retry_at:
            try:
                client = redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=1)
                # Kept: a client collected closes its pool, the subscription's too.
                self.client = client
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(ack_wake_channel())
                # Its confirmation read: from here on no message is missed.
                pubsub.get_message(timeout=1.0)
                self.pubsub = pubsub
            except redis.RedisError as exc:
                self._lost(exc)
        return self.pubsub

    def _lost(self, exc: Exception) -> None:
        logger.info("acknowledgement wake-ups unavailable, polling only: %s", exc)
        if self.pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self.pubsub.close()
        self.pubsub = None
        self.retry_at = time.monotonic() + RESUBSCRIBE_S

    def wait(self, stopped: Callable[[], bool] = lambda: False) -> Wake:
        """Until a message, the poll interval since the last full pass, the woken shards'
        second look, or a stop: what the next pass looks at."""
        while not stopped():
            now = time.monotonic()
            if now - self.last_full >= self.poll_s:
                self.last_full = now
                self.again = None
                return Wake(None)
            if self.again is not None and now >= self.again[0]:
                shards, self.again = self.again[1], None
                return Wake(shards)
            deadline = min(
                self.last_full + self.poll_s,
                self.again[0] if self.again else float("inf"),
                now + STOP_LOOK_S,
            )
            woken = self._listen(max(0.0, deadline - now))
            if woken:
                self.again = (time.monotonic() + INDEX_LAG_S, woken)
                return Wake(woken)
        return Wake(None)

    def woken_within(self, timeout: float) -> Wake | None:
        """The woken shards if a commit's message comes within ``timeout`` (their second
        look kept for the next wait), else ``None``: a dispatcher pacing a backlog
        listens between its looks at how far the sends got."""
        woken = self._listen(timeout)
        if not woken:
            return None
        self.again = (time.monotonic() + INDEX_LAG_S, woken)
        return Wake(woken)

    def _listen(self, timeout: float) -> frozenset[str]:
        """The shards named by the messages that came within ``timeout`` (all of them
        waiting, not only the first: a burst is one pass)."""
        pubsub = self._subscription()
        if pubsub is None:
            time.sleep(timeout)
            return frozenset()
        shards: set[str] = set()
        try:
            message = pubsub.get_message(timeout=timeout)
            while message is not None:
                data = message.get("data")
                if isinstance(data, bytes):
                    shards.update(s for s in data.decode().split(",") if s)
                message = pubsub.get_message(timeout=0)
        except (redis.RedisError, OSError) as exc:
            self._lost(exc)
        return frozenset(shards)

    def close(self) -> None:
        if self.pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self.pubsub.close()
            self.pubsub = None
