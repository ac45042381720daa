"""Acknowledgements exactly once through faults: ``manage.py simulate`` sends
pledges with its default faults, a real ``dispatch_acks`` delivers them to a real
``webhook_sink`` that answers 500 to 20 % of deliveries and holds the answer past the
dispatcher's read timeout after processing 5 %, and the dispatcher is killed (SIGKILL)
mid-send twice and started again. At rest: every recorded pledge's event processed
exactly once by the sink, none sent for an unrecorded intent, none given up, nothing
lost (reconciliation/simulation/ack_invariants.py, through tests/reliability/ack_invariants.py),
and the pledge invariants still hold."""

from __future__ import annotations

import signal
import sqlite3
import sys
import time
from collections import Counter

import pytest
from django.conf import settings

from reconciliation import clock
from reconciliation.acks.models import Endpoint, EventType
from reconciliation.acks.repository import AckRepository
from reconciliation.dynamo.local import free_port
from tests.helpers import AS_SYSTEM
from tests.processes import Process, wait_for
from tests.reliability.ack_invariants import SinkSeen, ack_check, ack_states, undelivered_cases
from tests.reliability.invariants import assert_invariants
from tests.reliability.procs import SinkProcess, dispatcher, django_env, sink_registered

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]

INTENTS = 200
SEED = 26
KILLS = 2
READ_TIMEOUT_S = 0.5
# The sink holds a lost answer this long: past the dispatcher's read timeout.
HOLD_S = 1.0
# simulate's default faults, with more commits that never apply (a worker crashed after
# its claim, a commit lost before it applied), so the run surely has unrecorded intents
# whose events must never be sent (at 1 % each, 200 intents have none about 2 runs in 100:
# 0.98^200).
SIMULATE_FAULTS = "ambiguous=0.03,ambiguous_no_commit=0.03,throttle=0.05,crash=0.03,conflict=0.05"
FAIL_RATE = 0.2
TIMEOUT_AFTER_RATE = 0.05


def due_now() -> int:
    """Pledges still in ``acks_due``, whenever due (a Query per shard)."""
    repository = AckRepository(AS_SYSTEM.store)
    return sum(len(repository.due(s, now=clock.epoch() + 10**7)) for s in repository.shards())


def processed(sink: SinkProcess) -> int:
    return int(sink.stats(brief=True)["processed_count"])


def held_request(sink: SinkProcess) -> str | None:
    """The ``webhook-id`` of a request the sink holds open while the dispatcher still
    waits for its answer: open over 0.1 s (a normal answer takes milliseconds) and under
    half the read timeout. Killing the dispatcher then is killing it mid-send."""
    for request in sink.stats(brief=True)["in_flight"]:
        if 0.1 < request["age_s"] < READ_TIMEOUT_S / 2:
            return str(request["id"])
    return None


def endpoint_of(db_path) -> Endpoint:
    """The endpoint ``add_webhook`` registered, as the dispatcher reads it (its row)."""
    with sqlite3.connect(db_path) as db:
        [(pk, tenant, url, events)] = db.execute(
            "SELECT e.id, t.name, e.url, e.events FROM dashboard_webhookendpoint e "
            "JOIN dashboard_tenant t ON t.id = e.tenant_id"
        ).fetchall()
    return Endpoint(f"E{pk}", tenant, url, "", events=tuple(events.split(",")))


@pytest.mark.timeout(600)
def test_acks_exactly_once_through_sink_faults_and_two_dispatcher_kills(
    ddb, tmp_path, log_dir, record
):
    """200 simulated intents with faults; sink 500 × 20 %, lost answers × 5 %; the
    dispatcher SIGKILLed mid-send twice and restarted: 0 lost, 0 processed twice, 0 sent
    for an unrecorded intent, 0 given up; each killed send was sent again, same id."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        # simulate and the dispatcher need no Redis: a port where nothing listens.
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        WEBHOOK_ALLOW_LOOPBACK="1",
        ACK_POLL_S="0.2",
        ACK_CONNECT_TIMEOUT_S="1",
        ACK_READ_TIMEOUT_S=str(READ_TIMEOUT_S),
        # A killed dispatcher's lease runs out this soon (more than connect + read).
        ACK_LEASE_S="3",
        # 3 days 22 h of retries in about 6 minutes: a delivery failing 4 times in a row
        # waits 5 s, not 43 min; giving up would take 12 failures in a row (0.25^12).
        ACK_RETRY_SCALE="0.001",
    )
    sink = sink_registered(
        env,
        log_dir,
        tenant="sim",
        flags=[
            "--fail-rate",
            str(FAIL_RATE),
            "--timeout-after-processing-rate",
            str(TIMEOUT_AFTER_RATE),
            "--delay",
            str(HOLD_S),
            "--seed",
            str(SEED),
        ],
    ).start()
    endpoint = endpoint_of(tmp_path / "db.sqlite3")
    simulate = Process(
        [sys.executable, "manage.py", "simulate", "--pledges", str(INTENTS)]
        + ["--faults", SIMULATE_FAULTS, "--seed", str(SEED)],
        env=env,
        log_path=log_dir / "simulate.log",
    )
    dispatchers = [dispatcher(env, log_dir, 0).start()]
    killed: list[str] = []
    started = time.monotonic()
    try:
        simulate.start()
        for n in range(KILLS):
            # Let the dispatcher deliver a while first, so the kills fall mid-run.
            floor = processed(sink) + 20
            wait_for(lambda: processed(sink) >= floor, timeout=180, what="deliveries")
            held = wait_for(
                lambda: held_request(sink), timeout=180, interval=0.05, what="a send held"
            )
            dispatchers[-1].stop(signal.SIGKILL)
            killed.append(held)
            dispatchers.append(dispatcher(env, log_dir, n + 1).start())
        wait_for(lambda: not simulate.alive(), timeout=300, what="simulate to finish")
        assert simulate.proc is not None and simulate.proc.returncode == 0, simulate.tail()
        traffic_s = time.monotonic() - started
        # At rest: nothing due any more, and no request open at the sink.
        wait_for(
            lambda: due_now() == 0 and not sink.stats(brief=True)["in_flight"],
            timeout=180,
            interval=0.5,
            what="every acknowledgement settled",
        )
        rest_s = time.monotonic() - started
        for process in dispatchers:
            process.stop()
        stats = sink.stats()
    finally:
        for process in dispatchers:
            process.stop()
        sink.stop()

    seen = SinkSeen.from_stats(stats)
    report = ack_check(
        ack_states(ddb, AS_SYSTEM.store),
        seen,
        endpoint=endpoint,
        cases=undelivered_cases(ddb),
    )
    sent = Counter(seen.ids_seen)
    summary = simulate.log().splitlines()
    figures = {
        "intents": INTENTS,
        "unrecorded_intents": INTENTS - report.recorded,
        "simulate": next((line for line in summary if line.startswith("run ")), ""),
        "simulate_outcomes": next((line for line in summary if line.startswith("outcomes:")), ""),
        **report.figures(),
        "sink_misbehaved": stats["misbehaved"],
        "killed_mid_send": killed,
        "killed_sends_seen": [sent[k] for k in killed],
        "dispatcher_passes_lost_leases": sum(
            int(line.split(", ")[-1].split()[0])
            for p in dispatchers
            for line in p.log().splitlines()
            if line.startswith("dispatch_acks:") and "leases lost" in line
        ),
        "traffic_s": round(traffic_s, 1),
        "at_rest_s": round(rest_s, 1),
    }
    assert report.problems == [], [str(problem) for problem in report.problems[:30]]
    assert len(killed) == KILLS
    # Each send the kill cut short was sent again, with its same webhook-id, and
    # processed once (the sink saw it twice or more; ack_check: processed once).
    assert all(sent[k] >= 2 for k in killed), figures
    assert report.recorded > 0 and report.recorded < INTENTS, "the faults left some unrecorded"
    assert stats["misbehaved"].get("500", 0) > 0 and stats["misbehaved"].get("timeout", 0) > 0
    assert EventType.PLEDGE_RECORDED in endpoint.events
    figures["invariants"] = assert_invariants(ddb).figures()
    record("acks", figures)


def lease_owner_pid(store, intent_id: str) -> int | None:
    """The pid of the dispatcher holding the shard lease of ``intent_id``'s pledge (the
    owner's name is ``host:pid:random``: reconciliation/acks/shard_lease.py)."""
    from reconciliation.acks.shard_lease import shard_lease_key
    from reconciliation.dynamo.tables import ack_shard

    item = store.client.get_item(
        TableName=store.tables.cases,
        Key={"case_id": {"S": shard_lease_key(store.region_name, ack_shard(intent_id))}},
        ConsistentRead=True,
    ).get("Item")
    owner = (item or {}).get("lease_owner", {}).get("S", "")
    parts = owner.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def held_by(sink: SinkProcess, store, dispatchers: list[Process]) -> tuple[Process, str] | None:
    """A dispatcher with a send held open at the sink right now, and the send's id
    (processed, its answer held: the payload names the pledge, whose shard's lease names
    the dispatcher)."""
    held = held_request(sink)
    if held is None:
        return None
    event = sink.stats()["events"].get(held)
    if event is None:
        return None
    pid = lease_owner_pid(store, f"{event['data']['tenant']}#{event['data']['intent_id']}")
    victim = next((p for p in dispatchers if p.alive() and p.pid == pid), None)
    return (victim, held) if victim is not None else None


@pytest.mark.timeout(600)
def test_acks_exactly_once_with_dispatchers_sharing_rebalancing_and_killed_mid_pool(
    ddb, tmp_path, log_dir, record
):
    """200 simulated intents with faults, the sink failing as above; two dispatchers
    share the shards (each sends on its pool); a third starts mid-run (the shards are
    rebalanced while sends are under way); then the dispatcher holding a send open is
    SIGKILLed mid-pool and the rest take its shards: 0 lost, 0 processed twice, 0 sent
    for an unrecorded intent, 0 given up; the killed send sent again, same id."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        # The wake-up's Redis: this worker's database (a lost wake-up costs latency only).
        redis_url=settings.REDIS_URL,
        WEBHOOK_ALLOW_LOOPBACK="1",
        ACK_POLL_S="0.2",
        ACK_CONNECT_TIMEOUT_S="1",
        ACK_READ_TIMEOUT_S=str(READ_TIMEOUT_S),
        ACK_LEASE_S="3",  # and the roster's heartbeat: a killed dispatcher is gone in 3 s
        ACK_RETRY_SCALE="0.001",
        ACK_WORKERS="8",
        # Past the retry schedule's first attempts: the breaker must not pause the one sink.
        ACK_BREAKER_FAILURES="50",
    )
    sink = sink_registered(
        env,
        log_dir,
        tenant="sim",
        flags=[
            "--fail-rate",
            str(FAIL_RATE),
            "--timeout-after-processing-rate",
            str(TIMEOUT_AFTER_RATE),
            "--delay",
            str(HOLD_S),
            "--seed",
            str(SEED + 1),
        ],
    ).start()
    endpoint = endpoint_of(tmp_path / "db.sqlite3")
    simulate = Process(
        [sys.executable, "manage.py", "simulate", "--pledges", str(INTENTS)]
        + ["--faults", SIMULATE_FAULTS, "--seed", str(SEED + 1), "--threads", "4"],
        env=env,
        log_path=log_dir / "simulate-shared.log",
    )
    store = AS_SYSTEM.store
    dispatchers = [dispatcher(env, log_dir, n).start() for n in (10, 11)]
    killed: list[str] = []
    try:
        simulate.start()
        floor = processed(sink) + 20
        wait_for(lambda: processed(sink) >= floor, timeout=180, what="deliveries")
        dispatchers.append(dispatcher(env, log_dir, 12).start())  # a rebalance mid-send
        floor = processed(sink) + 20
        wait_for(lambda: processed(sink) >= floor, timeout=180, what="deliveries")
        victim, held = wait_for(
            lambda: held_by(sink, store, dispatchers),
            timeout=180,
            interval=0.05,
            what="a held send",
        )
        victim.stop(signal.SIGKILL)  # mid-pool: its other workers' sends die with it
        killed.append(held)
        wait_for(lambda: not simulate.alive(), timeout=300, what="simulate to finish")
        assert simulate.proc is not None and simulate.proc.returncode == 0, simulate.tail()
        wait_for(
            lambda: due_now() == 0 and not sink.stats(brief=True)["in_flight"],
            timeout=180,
            interval=0.5,
            what="every acknowledgement settled",
        )
        for process in dispatchers:
            process.stop()
        stats = sink.stats()
    finally:
        for process in dispatchers:
            process.stop()
        sink.stop()

    seen = SinkSeen.from_stats(stats)
    report = ack_check(
        ack_states(ddb, AS_SYSTEM.store), seen, endpoint=endpoint, cases=undelivered_cases(ddb)
    )
    sent = Counter(seen.ids_seen)
    figures = {
        "intents": INTENTS,
        **report.figures(),
        "sink_misbehaved": stats["misbehaved"],
        "killed_mid_pool": killed,
        "killed_sends_seen": [sent[k] for k in killed],
        "dispatcher_lines": [
            line for p in dispatchers for line in p.log().splitlines() if "dispatch_acks:" in line
        ][-6:],
    }
    assert report.problems == [], [str(problem) for problem in report.problems[:30]]
    # The sends open when the dispatcher died were sent again (same id), processed once.
    assert killed and all(sent[k] >= 2 for k in killed), figures
    assert report.recorded > 0
    record("acks_shared", figures)
