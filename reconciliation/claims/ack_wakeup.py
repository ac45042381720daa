"""A wake-up for the acknowledgement dispatchers once a commit put a pledge in
``acks_due`` (docs/webhooks.md, "Wake-up"): the shard's name, published on Redis.

Best effort, and nothing of the commit's: the request thread only notes the shard and
sets an event (no I/O); one thread per process publishes what was noted since its last
message, so a burst of commits costs one message. Redis down costs nothing but the
latency the wake-up saves: the publisher stays quiet for ``QUIET_AFTER_FAILURE_S`` and
the dispatchers find the pledges at their next poll. A message lost, late or repeated
changes when a pledge is sent, never whether or how often: the pledge item in
``acks_due`` is the only fact a dispatcher acts on.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

# After Redis refused a message, wake-ups are dropped this long (no connect per commit).
QUIET_AFTER_FAILURE_S = 5.0
# A message's bound: Redis on the local network answers in well under a millisecond.
PUBLISH_TIMEOUT_S = 0.5


def ack_wake_channel() -> str:
    """The channel, per table prefix: two deployments sharing a Redis wake only their own."""
    return f"{settings.DDB_TABLE_PREFIX}acks-due"


class _Publisher:
    """This process's publishing thread and the shards noted for its next message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.noted: set[str] = set()
        self.ready = threading.Event()
        self.pid = 0  # the process the thread runs in (a fork has none yet)
        self.quiet_until = 0.0
        self.client: redis.Redis | None = None

    def note(self, shard: str) -> None:
        with self.lock:
            if time.monotonic() < self.quiet_until:
                return
            self.noted.add(shard)
            if self.pid != os.getpid():
                self.pid = os.getpid()
                self.client = None
                threading.Thread(target=self._run, name="ack-wakeup", daemon=True).start()
        self.ready.set()

    def _run(self) -> None:
        while True:
            self.ready.wait()
            self.ready.clear()
            with self.lock:
                shards, self.noted = self.noted, set()
            if shards:
                self._publish(",".join(sorted(shards)))

    def _publish(self, message: str) -> None:
        try:
            if self.client is None:
                self.client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    socket_timeout=PUBLISH_TIMEOUT_S,
                    socket_connect_timeout=PUBLISH_TIMEOUT_S,
                )
            self.client.publish(ack_wake_channel(), message)
        except Exception as exc:  # noqa: BLE001 - the thread outlives any failure of Redis
            with self.lock:
                self.quiet_until = time.monotonic() + QUIET_AFTER_FAILURE_S
            logger.info("acknowledgement wake-up not published (the poll finds it): %s", exc)


_publisher = _Publisher()


def ack_wake(shard: str) -> None:
    """Tell the dispatchers that ``shard`` of ``acks_due`` has a pledge due now. Never
    raises and never waits (the commit's answer does not depend on it)."""
    if settings.ACK_WAKE:
        _publisher.note(shard)
