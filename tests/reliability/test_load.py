"""Load: 64 concurrent clients send 2 000 pledges over 200 idempotency keys
(ten sends of the same body per key, shuffled) through the real HTTP API of the
production server, gunicorn, started as a subprocess. Exactly 200 pledges result,
none is lost, and every answer is one of the docs/design.md §4 outcomes."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter, defaultdict

import pytest
from django.conf import settings

from reconciliation.dynamo.local import free_port
from tests.helpers import cases, pledges
from tests.reliability.invariants import assert_invariants
from tests.reliability.procs import ApiServer, Tally, django_env
from tests.reliability.workload import body_for

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.dynamodb_local_only,
    pytest.mark.django_db(databases=[]),
]

CLIENTS = 64
REQUESTS = 2000
KEYS = 200
# Without faults a request ends committed, replayed, or in progress behind its twin.
ALLOWED = {201, 200, 409}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.timeout(900)
def test_load_64_clients_2000_requests_over_200_keys(ddb, tmp_path, log_dir, record):  # noqa: PLR0915
    """64 clients, 2 000 POSTs over 200 keys → exactly 200 pledges, one 201 per key,
    every other answer a replay of that very body or a 409 in progress, 0 lost."""
    env = django_env(
        tmp_path,
        endpoint_url=ddb.endpoint_url,
        table_prefix=settings.DDB_TABLE_PREFIX,
        # The intake API needs no Redis: point it at a port where nothing listens.
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
    )
    server = ApiServer(env, log_dir, workers=2, threads=8)
    server.prepare("load")
    server.start()
    sends = [f"load-{i:03d}" for i in range(KEYS) for _ in range(REQUESTS // KEYS)]
    random.Random(2000).shuffle(sends)
    index = {f"load-{i:03d}": i for i in range(KEYS)}
    tally = Tally()
    cursor = iter(sends)
    cursor_lock = threading.Lock()
    barrier = threading.Barrier(CLIENTS)

    def client() -> None:
        api = server.client()
        barrier.wait()
        while True:
            with cursor_lock:
                key = next(cursor, None)
            if key is None:
                return
            tally.add("POST", key, api.post(key, body_for(index[key])))

    try:
        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        elapsed = time.monotonic() - started
        # 0 lost: every key reads back, through the API, as the body its 201 returned.
        api = server.client()
        readback = {key: api.get(key) for key in index}
    finally:
        server.stop()
    log = server.process.log()

    posts = [(key, a) for kind, key, a in tally.answers if kind == "POST"]
    statuses = Counter(a.status for _, a in posts)
    latencies = [a.ended - a.started for _, a in posts]
    figures = {
        "server": f"gunicorn dashboard.wsgi --workers {server.workers} --threads {server.threads}",
        "clients": CLIENTS,
        "requests": len(posts),
        "keys": KEYS,
        "status_distribution": {str(k): v for k, v in sorted(statuses.items())},
        "duration_s": round(elapsed, 1),
        "throughput_rps": round(len(posts) / elapsed, 1),
        "latency_ms": {
            "p50": round(statistics.median(latencies) * 1000),
            "p95": round(percentile(latencies, 0.95) * 1000),
            "p99": round(percentile(latencies, 0.99) * 1000),
            "max": round(max(latencies) * 1000),
        },
    }
    print(f"\nHTTP status distribution: {figures['status_distribution']}")
    assert len(posts) == REQUESTS
    assert set(statuses) <= ALLOWED, (statuses, log[-3000:])

    created: dict[str, dict] = {}
    by_key: dict[str, Counter] = defaultdict(Counter)
    for key, answer in posts:
        by_key[key][answer.status] += 1
        if answer.status == 201:
            assert key not in created, f"{key}: a second 201"
            created[key] = answer.body
    assert sorted(created) == sorted(index), "some keys never got their 201"
    for key, answer in posts:
        if answer.status == 200:
            assert answer.headers.get("idempotent-replayed") == "true"
            assert answer.body == created[key], f"{key}: the replay differs from the 201"
        elif answer.status == 409:
            assert answer.body["error"] == "request_in_progress" and answer.retry_after >= 1
    lost = [k for k, a in readback.items() if a.status != 200 or a.body != created[k]]
    figures["lost"] = len(lost)
    assert lost == []

    stored = pledges(ddb)
    figures["pledges"] = len(stored)
    assert len(stored) == KEYS
    assert cases(ddb) == [], "a clean run opens no case"
    figures["invariants"] = assert_invariants(ddb).figures()
    figures["keys_with_a_409"] = sum(1 for c in by_key.values() if c[409])
    record("load", figures)
