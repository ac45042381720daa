"""Several dispatchers share the shards (docs/webhooks.md, "Several dispatchers"): each
holds a fair share of the shard leases, a dispatcher that starts takes its share from
the others, one that stops (or dies) leaves its shards to the rest; and a commit wakes
the dispatchers through Redis, the poll staying the safety net."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings as django_settings

from reconciliation import clock
from reconciliation.acks.dispatch import Dispatcher
from reconciliation.acks.models import AttemptResult, Endpoint, secret_new
from reconciliation.acks.repository import AckRepository
from reconciliation.acks.roster import READ_EVERY_S, Roster, fair_share
from reconciliation.acks.shard_lease import ShardLeases
from reconciliation.acks.wakeup import Wakeups
from reconciliation.claims.ack_wakeup import ack_wake, ack_wake_channel
from reconciliation.dynamo.tables import ACK_SHARDS, ack_shard
from tests.conftest import pledge_body
from tests.helpers import AS_SYSTEM

pytestmark = pytest.mark.django_db

ENDPOINT = Endpoint("E1", "acme", "https://crm.example.org/hooks", secret_new())


def one_key_per_shard(prefix: str) -> dict[str, str]:
    """An idempotency key of ``acme`` for every ``acks_due`` shard: ``{shard: key}``."""
    keys: dict[str, str] = {}
    n = 0
    while len(keys) < ACK_SHARDS:
        key = f"{prefix}-{n}"
        keys.setdefault(ack_shard(f"acme#{key}"), key)
        n += 1
    return keys


def dispatcher(name: str, sent: list[str]) -> Dispatcher:
    store = AS_SYSTEM.store
    leases = ShardLeases(store, owner=name)

    def answer(target, *, headers, **kwargs):
        sent.append(headers["webhook-id"])
        return AttemptResult(200)

    return Dispatcher(
        store,
        endpoints_for=lambda t: [ENDPOINT],
        leases=leases,
        roster=Roster(store, owner=name, ttl_s=django_settings.ACK_LEASE_S),
        resolve=lambda h, p: ["93.184.216.34"],
        sender=answer,
    )


def post_every_shard(api, prefix: str) -> None:
    for key in one_key_per_shard(prefix).values():
        assert api.post(key, pledge_body()).status_code == 201


def test_the_fair_share_covers_every_shard():
    """``ceil(shards / live)``: every shard is someone's whatever the count."""
    assert [fair_share(8, n) for n in (0, 1, 2, 3, 4, 8, 9)] == [8, 8, 4, 3, 2, 1, 1]
    assert all(fair_share(8, n) * n >= 8 for n in range(1, 12))


def test_two_dispatchers_split_the_shards_and_send_each_pledge_once(ddb, api):
    """With a and b both in the roster, a pledge due in every shard: a's pass takes at
    most its share (4 leases); b's takes the rest; each pledge is sent once, none by
    both."""
    a_sent: list[str] = []
    b_sent: list[str] = []
    a, b = dispatcher("a", a_sent), dispatcher("b", b_sent)
    assert b.roster is not None and b.roster.live_count() == 1  # b's beat is in
    post_every_shard(api, "split")
    try:
        a.run_pass()
        a.wait()
        b.run_pass()
        b.wait()
        assert len(a.leases.active()) == 4 and len(b.leases.active()) == 4
        assert not set(a.leases.active()) & set(b.leases.active())
        assert len(a_sent) == 4 and len(b_sent) == 4
        assert not set(a_sent) & set(b_sent)
        repository = AckRepository(AS_SYSTEM.store)
        assert not any(repository.due(s, now=clock.epoch() + 10**6) for s in repository.shards())
    finally:
        a.close()
        b.close()


def test_a_dispatcher_that_starts_takes_its_share_from_the_one_running(ddb, api):
    """a alone holds all 8 leases; b starts: at a's next roster read a gives back the 4
    it holds beyond its share (idle ones at once) and b's pass takes them; when b stops
    (leaves the roster, gives back its leases) a takes all 8 again."""
    a_sent: list[str] = []
    b_sent: list[str] = []
    a = dispatcher("a", a_sent)
    post_every_shard(api, "alone")
    a.run_pass()
    a.wait()
    assert len(a.leases.active()) == 8 and len(a_sent) == 8
    b = dispatcher("b", b_sent)
    try:
        assert b.roster is not None and b.roster.live_count() == 2
        post_every_shard(api, "joined")
        with clock.travel(READ_EVERY_S):  # a reads the roster again
            a.run_pass()
            a.wait()
            assert len(a.leases.active()) == 4
            b.run_pass()
            b.wait()
        assert len(b.leases.active()) == 4
        assert len(a_sent) + len(b_sent) == 16 and len(set(a_sent + b_sent)) == 16

        b.close()
        b.leases.release()
        b.roster.leave()
        post_every_shard(api, "left")
        with clock.travel(2 * READ_EVERY_S):
            a.run_pass()
            a.wait()
        assert len(a.leases.active()) == 8
        assert len(set(a_sent + b_sent)) == 24
    finally:
        a.close()
        b.close()


def test_a_dead_dispatchers_shards_are_taken_once_its_heartbeat_and_leases_run_out(ddb, api):
    """b takes its share and dies (no release, no leave). a keeps to its share while b's
    heartbeat lives; once it and b's leases ran out, a takes every shard and sends b's
    pledges."""
    a_sent: list[str] = []
    b_sent: list[str] = []
    a, b = dispatcher("a", a_sent), dispatcher("b", b_sent)
    assert b.roster is not None and a.roster is not None
    a.roster.live_count(), b.roster.live_count()  # both beat: a share of 4 each
    post_every_shard(api, "dead")
    b.run_pass()
    b.wait()
    b.close()  # dies here: its leases and heartbeat stay until they run out
    assert len(b_sent) == 4
    b_shards = b.leases.active()
    post_every_shard(api, "dead-later")
    try:
        a.run_pass()
        a.wait()
        assert len(a.leases.active()) == 4  # b's 4 are still b's
        with clock.travel(django_settings.ACK_LEASE_S + 1):
            a.run_pass()
            a.wait()
            assert a.roster.live_count() == 1
            assert set(b_shards) <= set(a.leases.active())
        assert len(set(a_sent + b_sent)) == 16
        repository = AckRepository(AS_SYSTEM.store)
        assert not any(repository.due(s, now=clock.epoch() + 10**6) for s in repository.shards())
    finally:
        a.close()


def test_a_wake_up_reaches_a_waiting_dispatcher_within_the_poll(settings):
    """Published after a commit, the shard's name reaches a dispatcher waiting on a long
    poll within a fraction of a second; the same shard comes back once more after the
    index's lag; with nothing published the wait ends at the poll, over every shard."""
    wakeups = Wakeups(poll_s=30)
    try:
        assert wakeups.subscribe()
        started = time.monotonic()
        ack_wake("A#3")
        woken = wakeups.wait(lambda: False)
        assert woken.shards == frozenset({"A#3"})
        assert time.monotonic() - started < 1.0
        assert wakeups.wait(lambda: False).shards == frozenset({"A#3"})  # the second look
        wakeups.poll_s = 0.3
        assert wakeups.wait(lambda: False).shards is None
    finally:
        wakeups.close()


def test_a_commit_publishes_its_shard(ddb, api, settings):
    """A pledge recorded through the API publishes its ``acks_due`` shard on the wake-up
    channel (a subscriber on the real Redis hears it)."""
    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(ack_wake_channel())
    try:
        pubsub.get_message(timeout=1)
        assert api.post("wake-1", pledge_body()).status_code == 201
        message = pubsub.get_message(timeout=2)
        while message is None or message["type"] != "message":
            message = pubsub.get_message(timeout=2)
            assert message is not None, "no wake-up published"
        assert message["data"].decode().split(",") == [ack_shard("acme#wake-1")]
    finally:
        pubsub.close()


def test_a_wake_up_with_redis_down_costs_nothing(settings):
    """Redis unreachable: publishing never raises or waits, and a waiting dispatcher
    falls back to its poll."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    started = time.monotonic()
    for _ in range(100):
        ack_wake("A#1")
    assert time.monotonic() - started < 0.1
    wakeups = Wakeups(poll_s=0.3)
    try:
        assert wakeups.wait(lambda: False).shards is None
    finally:
        wakeups.close()
