"""The intake rate limit per tenant: a token bucket in (real) Redis, answered
429 with ``Retry-After`` before anything is written; known keys are never refused."""

from __future__ import annotations

import math
import time

import pytest
from django.core.management import call_command
from prometheus_client import REGISTRY

from dashboard.tenancy.models import ApiToken, Tenant
from tests.conftest import ApiCaller, pledge_body
from tests.helpers import audit_events, claims, pledges

pytestmark = pytest.mark.django_db


def limit(tenant: str, *, rate_per_s: float, burst: int) -> None:
    Tenant.objects.filter(name=tenant).update(intake_rate_per_s=rate_per_s, intake_burst=burst)


def limited_count(tenant: str) -> float:
    return REGISTRY.get_sample_value("intake_rate_limited_total", {"tenant": tenant}) or 0.0


def test_a_burst_then_429_with_retry_after_and_nothing_written(ddb, api):
    """Three requests at once pass (the burst); the fourth, a new key, is answered 429
    with ``Retry-After`` and leaves no claim, pledge or ledger change; it is counted."""
    limit("acme", rate_per_s=0.05, burst=3)  # one token every 20 s
    before = limited_count("acme")
    emptied_from = time.monotonic()
    for n in range(3):
        assert api.post(f"burst-{n}", pledge_body()).status_code == 201
    claims_before = claims(ddb)

    refused = api.post("burst-3", pledge_body())
    elapsed = time.monotonic() - emptied_from

    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limited"
    assert refused.json()["intent_id"] == "burst-3"
    # The next token is due 20 s after the first burst request took one, less what has
    # passed since: the wait the tenant's rate gives, whole seconds rounded up.
    assert math.ceil(20 - elapsed) <= int(refused["Retry-After"]) <= 20
    assert refused["Cache-Control"] == "no-store"
    assert claims(ddb) == claims_before and len(claims_before) == 3
    assert len(pledges(ddb)) == 3
    assert limited_count("acme") == before + 1
    assert api.get("burst-3").status_code == 404


@pytest.mark.engines("moto")
def test_the_bucket_refills_at_the_tenants_rate(ddb, api):
    """At one token every 2 s with a burst of one, a refused client that waits the
    ``Retry-After`` it was given is served."""
    limit("acme", rate_per_s=0.5, burst=1)
    assert api.post("refill-1", pledge_body()).status_code == 201
    refused = api.post("refill-2", pledge_body())
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 2
    time.sleep(int(refused["Retry-After"]))
    assert api.post("refill-2", pledge_body()).status_code == 201


@pytest.mark.engines("moto")
def test_the_settings_default_applies_to_a_tenant_without_its_own(ddb, api, settings):
    """A tenant with no limit of its own gets ``INTAKE_RATE_PER_S`` / ``INTAKE_BURST``."""
    settings.INTAKE_RATE_PER_S, settings.INTAKE_BURST = 0.05, 2
    assert [api.post(f"dflt-{n}", pledge_body()).status_code for n in range(3)] == [201, 201, 429]


@pytest.mark.engines("moto")
def test_a_replay_of_an_accepted_key_passes_while_limited(ddb, api):
    """With the bucket empty, a new key is refused but the client's retry of an accepted
    key gets its original answer (200, replayed), and so does the key reused (422)."""
    limit("acme", rate_per_s=0.05, burst=1)
    created = api.post("rep-1", pledge_body())
    assert created.status_code == 201
    assert api.post("rep-2", pledge_body()).status_code == 429

    replay = api.post("rep-1", pledge_body())

    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert replay.json() == created.json()
    assert api.post("rep-1", pledge_body(amount="30.00")).status_code == 422
    assert api.post("rep-3", pledge_body()).status_code == 429
    assert len(pledges(ddb)) == 1


@pytest.mark.engines("moto")
def test_each_tenant_has_a_bucket_of_its_own(ddb, api, client):
    """acme's empty bucket refuses acme only: globex, with the same limit, is served."""
    _, raw = ApiToken.issue("globex")
    globex = ApiCaller(client, raw, "globex")
    limit("acme", rate_per_s=0.05, burst=1)
    limit("globex", rate_per_s=0.05, burst=1)
    assert api.post("iso-1", pledge_body()).status_code == 201
    assert api.post("iso-2", pledge_body()).status_code == 429
    assert globex.post("iso-1", pledge_body()).status_code == 201
    assert globex.post("iso-2", pledge_body()).status_code == 429


@pytest.mark.engines("moto")
def test_redis_unreachable_fails_open(ddb, api, settings):
    """Redis refusing connections: every request is admitted (the claim still makes
    each write happen once), and each is counted and logged as admitted unlimited."""
    limit("acme", rate_per_s=0.05, burst=1)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    before = REGISTRY.get_sample_value("intake_rate_limit_unavailable_total") or 0.0

    answers = [api.post(f"open-{n}", pledge_body()).status_code for n in range(3)]

    assert answers == [201, 201, 201]
    assert len(pledges(ddb)) == 3
    assert REGISTRY.get_sample_value("intake_rate_limit_unavailable_total") == before + 3


@pytest.mark.engines("moto")
def test_set_intake_limit_is_audited_and_applies_to_the_next_request(ddb, api):
    """``set_intake_limit`` writes the tenant's limit with an audit event (before and
    after) and the next request is held to it; ``--default`` gives the settings back."""
    call_command("set_intake_limit", "--tenant", "acme", "--rate", "0.05", "--burst", "1")
    assert api.post("cmd-1", pledge_body()).status_code == 201
    assert api.post("cmd-2", pledge_body()).status_code == 429
    call_command("set_intake_limit", "--tenant", "acme", "--default")
    assert api.post("cmd-2", pledge_body()).status_code == 201
    events = [e for e in audit_events(ddb, "TENANT#acme") if e["action"] == "intake_limit_changed"]
    assert [(e["before"], e["after"]) for e in events] == [
        ({"rate_per_s": None, "burst": None}, {"rate_per_s": "0.05", "burst": 1}),
        ({"rate_per_s": "0.05", "burst": 1}, {"rate_per_s": None, "burst": None}),
    ]
