"""A Celery worker holding a countdown task while its Redis restarts: kombu's own
restore of unacknowledged messages raises ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` with Redis down, which Celery treats as unrecoverable, and a
worker that exits leaves the held task to the visibility timeout (an hour). So the
worker stays up, and the held task runs exactly once after Redis is back, without
waiting for that timeout (dashboard/celery_broker.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis
from celery import Celery
from kombu import Connection

from dashboard import celery_broker
from reconciliation.dynamo.local import free_port
from tests.processes import celery_worker, wait_for
from tests.reliability.marker_tasks import MARK_TASK
from tests.reliability.procs import RedisServer, django_env

pytestmark = pytest.mark.reliability

COUNTDOWN_S = 8


def marks(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.celery_worker
@pytest.mark.timeout(180)
@pytest.mark.parametrize("redis_down_s", [4, 12], ids=["back-before-due", "back-after-due"])
def test_worker_survives_redis_restart_holding_a_countdown_task(
    tmp_path, log_dir, record, redis_down_s
):
    """A prefork worker holds a task with an 8 s countdown (unacknowledged in Redis); the
    broker, persisting to an append-only file, is stopped and started again before or
    after the task is due: the worker is still running and the task ran exactly once, at
    its countdown or as soon as the worker reconnected."""
    broker = RedisServer(log_dir, data_dir=tmp_path / "redis")
    broker.start()
    # The worker needs no DynamoDB for this task: the endpoint is a closed port.
    env = django_env(
        tmp_path,
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        table_prefix="unused-",
        redis_url=broker.url,
    )
    worker = celery_worker(env, log_dir, pool="prefork", concurrency=1)
    worker.args += ["--include", "tests.reliability.marker_tasks"]
    sender = Celery("reliability-sender", broker=broker.url, set_as_current=False)
    marks_path = tmp_path / "marks.txt"
    figures: dict = {"countdown_s": COUNTDOWN_S, "redis_down_s": redis_down_s}
    try:
        worker.start()
        wait_for(lambda: " ready." in worker.log(), timeout=60, what="the worker to be ready")
        started = time.monotonic()
        task_id = sender.send_task(
            MARK_TASK, args=[str(marks_path), "held"], countdown=COUNTDOWN_S
        ).id
        broker_client = redis.Redis.from_url(broker.url)
        wait_for(
            lambda: broker_client.hlen("unacked") == 1,
            timeout=10,
            what="the worker to hold the countdown task unacknowledged",
        )
        broker_client.close()
        broker.stop()
        time.sleep(redis_down_s)
        broker.start()
        up_at = time.monotonic()
        wait_for(
            lambda: marks(marks_path) or not worker.alive(),
            timeout=60,
            what="the held task to run after Redis came back",
        )
        figures["ran_s_after_send"] = round(time.monotonic() - started, 1)
        figures["ran_s_after_redis_back"] = round(time.monotonic() - up_at, 1)
        # A duplicate delivery would come within the worker's next polls.
        time.sleep(3)
        figures["worker_alive"] = worker.alive()
        figures["runs"] = len(marks(marks_path))
        broker_client = redis.Redis.from_url(broker.url)
        figures["left_unacked"] = broker_client.hlen("unacked")
        broker_client.close()
    finally:
        worker.stop()
        sender.close()
        broker.stop()
    log = worker.log()
    figures["deliveries"] = log.count(f"[{task_id}] received")
    figures["unrecoverable_errors"] = re.findall(r"Unrecoverable error: .*", log)
    record(f"worker_redis_restart_down_{redis_down_s}s", figures)
    assert figures["worker_alive"], log[-6000:]
    assert not figures["unrecoverable_errors"], log[-6000:]
    assert figures["runs"] == 1, (figures, log[-6000:])
    assert figures["left_unacked"] == 0, figures


def test_held_message_restored_on_reconnect_after_a_refused_restore(tmp_path, log_dir):
    """A consumer holds a message unacknowledged, Redis stops and the channel closes (its
    restore is refused, kombu's pool still configured): the channel closes quietly and
    the message is back in its queue, once, as soon as a channel connects again."""
    broker = RedisServer(log_dir, data_dir=tmp_path / "redis")
    broker.start()
    options = {"socket_timeout": 1, "socket_connect_timeout": 1}
    celery_broker._held_take()
    try:
        with Connection(
            broker.url, transport=celery_broker.Transport, transport_options=options
        ) as first:
            queue = first.SimpleQueue("held-on-restart")
            queue.put({"n": 1})
            message = queue.get(timeout=5)  # held: never acknowledged
            broker.stop()
            queue.channel.close()
            assert celery_broker._held_tags == {message.delivery_tag}
            broker.start()
            client = redis.Redis.from_url(broker.url)
            assert client.hlen("unacked") == 1  # the append-only file kept it
            with Connection(broker.url, transport=celery_broker.Transport) as second:
                second.default_channel  # connects, and restores what this process held
                assert celery_broker._held_tags == set()
                assert client.hlen("unacked") == 0
                assert client.llen("held-on-restart") == 1
                again = second.SimpleQueue("held-on-restart")
                restored = again.get(timeout=5)
                assert restored.payload == {"n": 1}
                restored.ack()
            client.close()
    finally:
        celery_broker._held_take()
        broker.stop()
