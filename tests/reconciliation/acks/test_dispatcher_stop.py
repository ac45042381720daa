"""A ``dispatch_acks`` asked to stop (SIGTERM from a process manager or a deploy, SIGINT
from Ctrl-C) ends its current send, takes no lease more, gives back the shard leases it
holds and exits 0, so the next dispatcher sends at once instead of after ``ACK_LEASE_S``
(docs/webhooks.md). A real dispatcher and a real ``webhook_sink`` process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from reconciliation import clock
from reconciliation.acks.shard_lease import SHARD_LEASE_PREFIX
from tests.conftest import pledge_body
from tests.helpers import scan_all
from tests.processes import wait_for
from tests.reliability.procs import dispatcher, django_env, sink_registered

# Whole process sets (a receiver, dispatchers): handed out first under xdist.
pytestmark = [pytest.mark.django_db, pytest.mark.dynamodb_local_only, pytest.mark.long]


def shard_leases(ddb) -> list[dict]:
    return [
        item
        for item in scan_all(ddb, ddb.tables.cases)
        if str(item["case_id"]).startswith(SHARD_LEASE_PREFIX)
    ]


def env_for(ddb, tmp_path, database_url: str, **extra: str) -> dict:
    return django_env(
        tmp_path,
        database_url=database_url,
        endpoint_url=ddb.endpoint_url,
        table_prefix=ddb.tables.idempotency_keys.removesuffix("idempotency_keys"),
        redis_url="redis://127.0.0.1:1/0",  # nothing here uses Redis
        WEBHOOK_ALLOW_LOOPBACK="1",
        ACK_POLL_S="0.2",
        ACK_LEASE_S="60",
        **extra,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_dispatcher_asked_to_stop_gives_back_its_shard_leases(
    ddb, api, tmp_path, subprocess_database_url, sig
):
    """After delivering, a dispatcher holds its shard's lease across passes (60 s here);
    stopped, it releases the lease (no ``lease_until`` left) and exits 0, and a second
    dispatcher sends the next pledge of that shard at once."""
    env = env_for(ddb, tmp_path, subprocess_database_url)
    sink = sink_registered(env, tmp_path, tenant="acme").start()
    first = dispatcher(env, tmp_path, 0).start()
    try:
        assert api.post("k-1", pledge_body()).status_code == 201
        wait_for(lambda: len(sink.stats()["processed"]) == 1, timeout=60, what="a delivery")
        (held,) = shard_leases(ddb)
        assert held["lease_until"] > clock.epoch() + 30  # held for the next passes

        first.stop(sig)
        assert first.proc is not None and first.proc.returncode == 0, first.tail()
        (released,) = shard_leases(ddb)
        assert "lease_until" not in released, first.tail()
        assert "shard leases released" in first.log()
    except BaseException:
        sink.stop()
        raise
    finally:
        first.stop(signal.SIGKILL)

    # The next dispatcher is not kept waiting for the lease to run out.
    assert api.post("k-2", pledge_body()).status_code == 201
    once = subprocess.run(
        [sys.executable, "manage.py", "dispatch_acks", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert once.returncode == 0, once.stderr
    assert "1 delivered" in once.stdout, once.stdout
    try:
        assert len(sink.stats()["processed"]) == 2
    finally:
        sink.stop()
