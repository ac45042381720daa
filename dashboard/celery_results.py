"""The Redis result backend, bounded for request paths.

Celery's Redis backend subscribes the publishing process to the task's result channel
on every ``apply_async``; in a web process nobody ever waits on that subscription, and
with Redis gone it turns a refused publish into "Retry limit exceeded ... the Celery
application must be restarted" (a 500 for every later request of that process). Web
requests only *poll* task state (one bounded GET), so publishing never subscribes here.
Each Redis call is also bounded: no retries with back-off inside redis-py, so a request
waits at most the configured socket timeouts (settings ``CELERY_REDIS_SOCKET_*``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery.backends.redis import RedisBackend
from redis.backoff import NoBackoff
from redis.retry import Retry

if TYPE_CHECKING:
    from kombu import Producer


class RequestSafeRedisBackend(RedisBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # celery's stubs omit ``connparams``, set by RedisBackend.__init__.
        self.connparams["retry"] = Retry(NoBackoff(), 0)  # type: ignore[attr-defined]

    def on_task_call(self, producer: Producer, task_id: str) -> None:
        """Never subscribe on publish: states are read by polling (see module doc)."""
