"""The Redis broker transport, surviving a Redis restart while the worker holds messages.

A worker holds a countdown (ETA) task unacknowledged until it runs: kombu keeps it in
the ``unacked`` hash in Redis and in the channel's QoS. When the connection is lost,
Celery closes the channel and kombu gives the held messages back to their queue
("Restoring N unacknowledged message(s)"). With Redis down that restore cannot work,
and in kombu 5.7.0 (the newest release) it crashes: Celery first ``collect()``s the lost
connection, which drops the transport's ``client``, then closes it; the restore rebuilds
kombu's connection pool from that ``client`` and ``_connparams`` raises
``AttributeError: 'NoneType' object has no attribute 'hostname'``. That is no connection
error, so Celery calls it unrecoverable and the worker exits. Even
without the crash the held tasks would wait: Celery forgets them on reconnect, and Redis
hands them out again only after the visibility timeout (an hour here).

So a restore that cannot reach Redis keeps the held delivery tags in this process and
restores them as soon as a channel connects again: each tag is moved back to its queue
in one Redis transaction, and only if it is still in the ``unacked`` hash, so a message
another worker restored meanwhile is not queued twice (and one that a Redis without
persistence lost cannot come back). That is the restore kombu would have done at close,
done later: an ``acks_late`` task still running, or one whose ack could not reach Redis,
is delivered again, as after any connection loss. A worker that exits instead (killed,
or Redis still down at shutdown) leaves its held messages to the visibility timeout.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kombu.transport import redis as kombu_redis

if TYPE_CHECKING:
    from redis import Redis

logger = logging.getLogger(__name__)

# Delivery tags this process held when a restore could not reach Redis.
_held_tags: set[str] = set()
_held_lock = threading.Lock()


def _held_take() -> list[str]:
    with _held_lock:
        tags = sorted(_held_tags)
        _held_tags.clear()
        return tags


def _held_keep(tags: Iterable[str]) -> None:
    with _held_lock:
        _held_tags.update(tags)


def _held_forget_in_child() -> None:
    # A forked pool process holds none of its parent's messages (restoring them twice
    # would be harmless, see above, but the parent is the one that restores them).
    global _held_lock
    _held_lock = threading.Lock()
    _held_tags.clear()


os.register_at_fork(after_in_child=_held_forget_in_child)


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Redis | None = None) -> None:
        delivered = self._delivered
        tags = list(delivered or ())
        if delivered is None or not tags:
            return
        # A closed connection cannot rebuild kombu's pool (the AttributeError above): it
        # is as unreachable as a refused one.
        reason: object = "the broker connection is closed"
        if self.channel.connection.client is not None:
            try:
                return super().restore_unacked(client)
            # kombu's stubs omit the attributes its Redis Channel and QoS have at run time.
            except self.channel.connection_errors as exc:  # type: ignore[attr-defined]
                reason = exc
        delivered.clear()
        _held_keep(tags)
        logger.warning(
            "Redis is unreachable (%s): %d unacknowledged message(s) are restored when "
            "the worker reconnects",
            reason,
            len(tags),
        )


class Channel(kombu_redis.Channel):
    QoS = QoS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # connects (PING), or raises a connection error
        tags = _held_take()
        restored = 0
        try:
            for tag in tags:
                self.qos.restore_by_tag(tag)  # type: ignore[attr-defined]
                restored += 1
        except self.connection_errors as exc:  # type: ignore[attr-defined]
            # Not raised: the channel is registered already; the next connect retries.
            _held_keep(tags[restored:])
            logger.warning(
                "Redis went away again (%s): %d message(s) still held", exc, len(tags) - restored
            )
        if restored:
            logger.info("Restored %d message(s) held while Redis was unreachable", restored)


class Transport(kombu_redis.Transport):
    Channel = Channel
